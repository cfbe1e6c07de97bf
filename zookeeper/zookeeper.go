// Package zookeeper is the ZooKeeper backend of distlock, on
// github.com/go-zookeeper/zk, behind "zk://" URLs.
//
// # Algorithm
//
// A lock on key lives under base/<escaped key>/ (a container znode, which
// the server deletes once it is empty, so millions of distinct keys do not
// pile up). To take it, a client creates an EPHEMERAL|SEQUENTIAL znode named
// "lock-<owner>-<sequence>" there and lists the children: the lowest
// sequence holds the lock. A waiter watches only its immediate predecessor
// (no herd effect), so waiters are served first come, first served. A
// waiter whose context ends deletes its znode before returning. The owner in
// the name is the lease's random 128-bit id: when a create's reply is lost
// with the connection, the znode is found again by that id and deleted (as
// Curator's "protected" mode does), so no orphan blocks the queue until the
// session ends.
//
// The fencing token is the lock znode's czxid: the ZooKeeper transaction id
// of its creation, 64-bit and ensemble-wide, so it strictly increases across
// the successive holders of a key — even when an empty key directory was
// reaped and recreated, which resets the 32-bit sequence suffix.
//
// # Guarantees
//
// A lock lives as long as the Locker's ZooKeeper session (one session per
// Locker): the server frees it when the holder releases it, or when the
// session ends (Close, or expiry after the session timeout without contact).
// The TTL option sets nothing on the server; it only drives the portable
// layer's local deadline, and a Refresh merely confirms the znode still
// exists. So a lease that is neither renewed (Do, WithAutoRenew) nor
// refreshed ends locally after its TTL while its znode stays until Release,
// Close or the session's end. Mutual exclusion does not depend on clocks.
// An ensemble of n servers keeps locks and tokens while a minority of
// (n−1)/2 servers is lost; a standalone server tolerates no failure.
//
// # Session states and Lease.Done
//
// A lease's Done channel closes (Err matching distlock.ErrLeaseLost) when
//   - the session expires: every lease of the session is lost;
//   - the connection has been down for the disconnect grace (see
//     WithDisconnectGrace); or
//   - with Dial, the server has answered nothing for two thirds of the
//     session timeout it granted (the silence bound).
//
// A lease reported lost while its session survives is deleted on
// reconnection. While the connection is down but within these bounds, the
// lease is at risk and Done stays open.
//
// # Loss notice before takeover
//
// Done closes before the server can expire the session and grant the lock
// to another client. The server expires a session no sooner than its
// timeout after the last request it received from it, and the timeout that
// counts is one the server granted: it clamps the one asked for into its
// [minSessionTimeout, maxSessionTimeout] (by default 2 and 20 ticks, 4 s
// and 40 s with the stock tickTime). Of the timeouts it granted a session,
// the smallest counts: the server stores the one it granted when it
// created the session, and a restarted server, or a new leader, restores
// the session with that one, whatever a later connection was granted (more,
// if minSessionTimeout was raised meanwhile). Dial watches its connections
// (it wraps go-zookeeper's dialer): it reads the granted timeout off the
// connect response of every connection and keeps the smallest granted to
// the session, T below (a new session starts afresh); and, since a
// session's requests are answered in order, it knows the send time t0 of
// the newest request the server has answered; the server heard from the
// session at t0 or later. It hands go-zookeeper T in place of a larger
// grant, so that go-zookeeper pings every T/3 and gives up on a silent
// connection after 2T/3 of the timeout that binds. The worst case, a link
// that goes silent:
//
//	t0          the client sends a request (a ping goes every T/3 at least)
//	            whose reply is the last it hears
//	t0 + 2T/3   Done closes (the silence bound) and the backend drops the
//	            connection, as go-zookeeper itself would: its read timeout
//	            is 2T/3 after the last reply
//	t0 + T      at the earliest, the server expires the session, deletes
//	            the lock znode, and the next waiter is granted the lock
//
// The last third of T is left for the client's timer lateness (scheduling,
// GC). A holder paused for longer, or a client clock running slow against
// the server's, is beyond any notice: fencing tokens are for that. The
// disconnect grace counts from go-zookeeper's disconnect event, which for a
// broken link (reset, refused, closed by the server) comes at once and for
// a silent one only at t0 + 2T/3 or later; it lets a lease survive a quick
// reconnection and never extends the silence bound. Its default is T/4,
// following T as it changes. Dial refuses a WithDisconnectGrace of 2T/3 or
// more of the first session's granted timeout: the silence bound would
// always come first, so such a grace would promise a tolerance that cannot
// be had; should T shrink later, the silence bound clamps the grace.
//
// Slow replies cost the notice nothing, since it counts from send times,
// but a link whose round trip (request sent to reply received) exceeds T/3
// cannot keep a lease: just before a ping's reply arrives, the newest
// request answered is T/3 plus a round trip old, so the silence bound
// reports the leases lost and drops the connection although the session
// lives. That is early, on the safe side; the lost leases' znodes are
// deleted once a connection is back, and it happens again for as long as
// the link stays that slow.
//
// The silence bound assumes that the server which answers is the one that
// expires sessions. In an ensemble only the leader does, and it learns of
// a client's pings to a follower only from that follower's answers to its
// own, every tickTime/2. Two cases eat into the last third of T. First, a
// follower cut off from the leader goes on answering its clients' pings
// for up to syncLimit·tickTime (until it notices the leader's silence and
// drops them), while the leader learns of no more of them after the cut;
// the last one it learnt of may be T/3 old. The notice stays ahead of the
// leader if
//
//	syncLimit·tickTime + tickTime/2 + min(grace, 2T/3) < 2T/3
//
// that is, with the default grace, syncLimit·tickTime + tickTime/2 under
// 5T/12: with the stock tickTime=2s and syncLimit=5, a session timeout of
// at least 27 s (and maxSessionTimeout to match). Second, a follower that
// answers a ping and then freezes (a long pause, or its host cut off from
// client and leader alike, with no FIN reaching the client) may never pass
// that ping on: the leader's last news of the session may be a ping
// interval, T/3, older than the client's, and the leader can expire the
// session 2T/3 after t0, just when the silence bound fires. Nothing is left
// for timer lateness then: the notice is ahead only by the leader's
// rounding of expiry times up to its next tick and by the time the
// hand-over to the next waiter takes.
//
// With New the backend cannot see the caller's connection: neither the
// granted timeouts nor the server's last answer, only the disconnect
// event, which for a silent link comes 2T/3 after the last reply arrived
// (T as go-zookeeper knows it), and later if a write hangs. Its grace
// therefore defaults to zero, which puts the notice about where Dial's
// silence bound is, but counted from the reply's arrival, not from its
// request's send time: the server may have last heard from the session a
// round trip before. So New's notice is ahead of the server only while the
// round trip stays under T/3 − grace, less the lateness of events and
// timers; on a slower link another client may be granted the lock before
// Done closes, and New cannot tell (Dial reports the loss early instead,
// see above). And go-zookeeper follows the newest grant: if the session
// was created with a smaller timeout, a restarted server or a new leader
// may expire the session on that one long before go-zookeeper notices the
// silence. A nonzero grace needs WithSessionTimeout, which must then be
// the smallest timeout granted to the session (or less), and must be under
// a third of it (2T/3 + grace < T). Dial behaves as New, and refuses a
// nonzero grace, if a zk.WithDialer in WithConnOptions replaces its dialer.
//
// go-zookeeper pauses about a second before it retries a server list it has
// gone through, so with a single server (or short session timeouts) a grace
// under a second turns every reconnection into a reported loss. These
// signals need the session's events: [Dial] receives them itself; with
// [New] pass the event channel from zk.Connect through [WithEvents].
// Without events Done closes only when a Refresh (Do and WithAutoRenew
// refresh every TTL/3) finds the znode gone.
//
// It requires ZooKeeper 3.5.3 or newer (container znodes).
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	driver.Register("zk", openURL)
}

// openURL implements zk://host:port,host:port/base/path?session_timeout=10s.
func openURL(ctx context.Context, u *url.URL, opts []distlock.Option) (driver.Backend, error) {
	q := driver.NewQuery(u)
	var urlOpts []distlock.Option
	if d, ok := q.Duration("session_timeout"); ok {
		urlOpts = append(urlOpts, WithSessionTimeout(d))
	}
	if d, ok := q.Duration("disconnect_grace"); ok {
		urlOpts = append(urlOpts, WithDisconnectGrace(d))
	}
	if err := q.Done(); err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: zk URL %q names no server", distlock.ErrInvalidURL, u.Redacted())
	}
	if u.Path != "" && u.Path != "/" {
		urlOpts = append(urlOpts, WithBasePath(strings.TrimSuffix(u.Path, "/")))
	}
	servers := strings.Split(u.Host, ",")
	if err := driver.Reachable(ctx, servers, ConnectTimeout); err != nil {
		return nil, err
	}
	return DialBackend(ctx, servers, append(urlOpts, opts...)...)
}

// Defaults.
const (
	// DefaultBasePath is the znode under which locks live.
	DefaultBasePath = "/distlock"
	// ConnectTimeout bounds how long Dial waits for a first session
	// (within its ctx) before failing with ErrUnavailable.
	ConnectTimeout = 5 * time.Second
	// DefaultSessionTimeout is the session timeout Dial asks for.
	DefaultSessionTimeout = 10 * time.Second
)

type (
	sessionTimeoutKey struct{}
	graceKey          struct{}
	basePathKey       struct{}
	eventsKey         struct{}
	connOptionsKey    struct{}
	aclKey            struct{}
	ensembleSizeKey   struct{}
)

// WithSessionTimeout sets the session timeout. Dial asks the server for it
// (default 10s); the server clamps it into its own [min, max] range, and
// Dial's loss notice follows the smallest timeout the server granted the
// session. With New, pass the smallest timeout the server granted the
// *zk.Conn's session, at its creation or since (or less): it bounds the
// disconnect grace.
func WithSessionTimeout(d time.Duration) distlock.Option {
	if d <= 0 || d > distlock.MaxTTL {
		return driver.InvalidOption("zookeeper: session timeout %v out of range", d)
	}
	return driver.BackendOption("zookeeper", "WithSessionTimeout", sessionTimeoutKey{}, d)
}

// WithDisconnectGrace sets how long after a disconnection the session's
// leases are reported lost unless the client is back in the session. Zero
// reports the loss at the first disconnect, as Curator recommends for
// locks. With Dial the default is a quarter of the session timeout T the
// server granted (the smallest it granted the session), and a grace of
// 2T/3 or more is refused: whatever the grace, Dial reports the loss once
// the server has been silent for 2T/3. With New the default is zero, and a
// nonzero grace needs WithSessionTimeout and must be under a third of it,
// less the link's round trip. See the package documentation for why.
func WithDisconnectGrace(d time.Duration) distlock.Option {
	if d < 0 {
		return driver.InvalidOption("zookeeper: disconnect grace %v is negative", d)
	}
	return driver.BackendOption("zookeeper", "WithDisconnectGrace", graceKey{}, d)
}

// WithBasePath sets the znode under which locks live (default "/distlock"):
// an absolute path, not the root, without a trailing slash. Missing
// ancestors are created as persistent znodes.
func WithBasePath(p string) distlock.Option {
	if err := validBase(p); err != nil {
		return driver.InvalidOption("zookeeper: base path %q: %v", p, err)
	}
	return driver.BackendOption("zookeeper", "WithBasePath", basePathKey{}, p)
}

// WithEvents hands New the event channel that zk.Connect returned with the
// *zk.Conn. The Locker then drains it (do not read it elsewhere) and learns
// of disconnections and session expiry, which close lost leases' Done.
func WithEvents(ch <-chan zk.Event) distlock.Option {
	if ch == nil {
		return driver.InvalidOption("zookeeper: nil event channel")
	}
	return driver.BackendOption("zookeeper", "WithEvents", eventsKey{}, ch)
}

// WithConnOptions passes options such as zk.WithLogger or zk.WithDialer to
// the zk.Connect that Dial makes. By default Dial sends the client's log
// lines to the distlock logger (WithLogger) at debug level. Dial installs
// its own zk.WithEventCallback after these options, replacing any given
// here: to see the events yourself, connect with zk.Connect and use New.
func WithConnOptions(opts ...func(*zk.Conn)) distlock.Option {
	for _, o := range opts {
		if o == nil {
			return driver.InvalidOption("zookeeper: nil connection option")
		}
	}
	return driver.BackendOption("zookeeper", "WithConnOptions", connOptionsKey{}, opts)
}

// WithACL sets the ACL of the znodes the Locker creates (default
// zk.WorldACL(zk.PermAll)).
func WithACL(acl []zk.ACL) distlock.Option {
	if len(acl) == 0 {
		return driver.InvalidOption("zookeeper: empty ACL")
	}
	return driver.BackendOption("zookeeper", "WithACL", aclKey{}, acl)
}

// WithEnsembleSize declares how many servers the ensemble has, for
// Guarantees().FailuresTolerated ((n−1)/2). Dial counts its server list by
// default; New assumes a standalone server unless told.
func WithEnsembleSize(n int) distlock.Option {
	if n < 1 {
		return driver.InvalidOption("zookeeper: ensemble size %d", n)
	}
	return driver.BackendOption("zookeeper", "WithEnsembleSize", ensembleSizeKey{}, n)
}

// Dial connects to the servers (host:port each), waits for a session until
// ctx ends, and returns a Locker that owns the connection: Close ends the
// session, which frees every lock still held.
func Dial(ctx context.Context, servers []string, opts ...distlock.Option) (distlock.Locker, error) {
	b, err := DialBackend(ctx, servers, opts...)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, opts...) // closes b if it fails
}

// New returns a Locker on conn, a session the caller made with zk.Connect
// and still owns: Close leaves it open. Pass WithEvents so that session
// loss reaches the leases; see the package documentation for what happens
// without it, and for what New cannot see of the connection that Dial does.
func New(conn *zk.Conn, opts ...distlock.Option) (distlock.Locker, error) {
	b, err := NewBackend(conn, opts...)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, opts...) // closes b if it fails
}

// DialBackend is Dial's raw Backend, for wrapping (tests, middleware).
func DialBackend(ctx context.Context, servers []string, opts ...distlock.Option) (driver.Backend, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", distlock.ErrInvalidOption)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: zookeeper: no servers", distlock.ErrInvalidOption)
	}
	for _, s := range servers {
		if strings.TrimSpace(s) == "" || strings.ContainsAny(s, "/?#@ ") {
			return nil, fmt.Errorf("%w: zookeeper: bad server address %q", distlock.ErrInvalidOption, s)
		}
	}
	o, err := driver.Resolve(driver.Settings{}, "zookeeper", opts)
	if err != nil {
		return nil, err
	}
	if _, ok := driver.BackendValue[<-chan zk.Event](o, eventsKey{}); ok {
		return nil, fmt.Errorf("%w: zookeeper: WithEvents is for New; Dial receives the events itself", distlock.ErrInvalidOption)
	}
	timeout := DefaultSessionTimeout
	if d, ok := driver.BackendValue[time.Duration](o, sessionTimeoutKey{}); ok {
		timeout = d
	}
	b := newBackend(o, timeout, true, len(servers))
	b.link = newLink()

	// The link's dialer goes first: a caller's zk.WithDialer replaces it,
	// which is noticed below.
	var dialErr atomic.Value // the last failed dial, for Open's error
	dial := func(network, addr string, d time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, d)
		if err != nil {
			dialErr.Store(err)
		}
		return c, err
	}
	connOpts := []func(*zk.Conn){zk.WithLogger(zkLogger{o.Logger}), zk.WithLogInfo(false),
		zk.WithDialer(b.link.dialer(dial))}
	if extra, ok := driver.BackendValue[[]func(*zk.Conn)](o, connOptionsKey{}); ok {
		connOpts = append(connOpts, extra...)
	}
	// Last, so a caller's option cannot unhook the backend from its session.
	connOpts = append(connOpts, zk.WithEventCallback(b.onEvent))
	conn, _, err := zk.Connect(servers, timeout, func(c *zk.Conn) {
		for _, f := range connOpts {
			f(c)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper: %w", distlock.ErrInvalidOption, err)
	}
	b.setConn(conn)
	abort := func() {
		b.quitOnce.Do(func() { close(b.quit); b.endLife() })
		b.sess.stop()
	}
	wait, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	select {
	case <-b.firstSession:
	case <-wait.Done():
		abort()
		go conn.Close() // may wait a second for a closeSession that cannot be sent
		cause := error(fmt.Errorf("no session within %v: %w", ConnectTimeout, wait.Err()))
		if err, ok := dialErr.Load().(error); ok {
			cause = fmt.Errorf("%w (last dial: %w)", cause, err)
		}
		return nil, driver.Unavailable(strings.Join(servers, ","), cause)
	}
	// The first session's connect response passed through the link before
	// the event that closed firstSession, unless another dialer made it.
	granted := b.link.granted()
	if granted == 0 {
		b.log(slog.LevelWarn, "a dialer in WithConnOptions replaced the one that watches the connection: the granted session timeout is unknown, and leases are reported lost at the first disconnect")
		if b.graceSet && b.grace > 0 {
			abort()
			conn.Close()
			return nil, fmt.Errorf("%w: zookeeper: disconnect grace %v: with a dialer of its own, Dial cannot see the session timeout the server granted, and no grace above zero can be shown safe",
				distlock.ErrInvalidOption, b.grace)
		}
	} else if b.graceSet && b.grace >= silenceBound(granted) {
		abort()
		conn.Close()
		return nil, fmt.Errorf("%w: zookeeper: disconnect grace %v is not below %v, two thirds of the session timeout the server granted (%v; asked %v): leases are reported lost after that much silence whatever the grace",
			distlock.ErrInvalidOption, b.grace, silenceBound(granted), granted, timeout)
	}
	b.start()
	return b, nil
}

// NewBackend is New's raw Backend, for wrapping (tests, middleware).
func NewBackend(conn *zk.Conn, opts ...distlock.Option) (driver.Backend, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zookeeper: nil *zk.Conn", distlock.ErrInvalidOption)
	}
	o, err := driver.Resolve(driver.Settings{}, "zookeeper", opts)
	if err != nil {
		return nil, err
	}
	if _, ok := driver.BackendValue[[]func(*zk.Conn)](o, connOptionsKey{}); ok {
		return nil, fmt.Errorf("%w: zookeeper: WithConnOptions is for Dial; New uses the caller's connection", distlock.ErrInvalidOption)
	}
	timeout, _ := driver.BackendValue[time.Duration](o, sessionTimeoutKey{}) // 0: unknown
	size := 1
	if n, ok := driver.BackendValue[int](o, ensembleSizeKey{}); ok {
		size = n
	}
	// The disconnect event comes 2T/3 after the server's last reply on a
	// silent link, so a grace of T/3 or more lets the server expire the
	// session first; without T no grace can be shown safe.
	if g, ok := driver.BackendValue[time.Duration](o, graceKey{}); ok && g > 0 {
		if timeout == 0 {
			return nil, fmt.Errorf("%w: zookeeper: New with a disconnect grace needs WithSessionTimeout (the timeout the server granted)", distlock.ErrInvalidOption)
		}
		if g >= timeout/3 {
			return nil, fmt.Errorf("%w: zookeeper: disconnect grace %v is not below a third of the session timeout %v: the server could expire the session before the loss is reported",
				distlock.ErrInvalidOption, g, timeout)
		}
	}
	b := newBackend(o, timeout, false, size)
	b.setConn(conn)
	if ch, ok := driver.BackendValue[<-chan zk.Event](o, eventsKey{}); ok {
		b.wg.Add(1)
		go b.drain(ch)
	}
	b.start()
	return b, nil
}

// backend implements driver.Backend, with a server-side queue (Lock).
type backend struct {
	driver.NoNotice
	conn    atomic.Pointer[zk.Conn]
	owned   bool // Dial made conn, so Close closes it
	base    string
	acl     []zk.ACL
	timeout time.Duration // session timeout asked (Dial) or declared (New); 0 when unknown
	grace   time.Duration // the disconnect grace, if graceSet
	// graceSet: WithDisconnectGrace was given; else the grace derives from
	// the granted session timeout (Dial) or is zero (New).
	graceSet bool
	link     *link // Dial's view of its connections; nil with New
	logger   *slog.Logger
	g        distlock.Guarantees

	sess    sessionState
	janitor janitor

	firstSession chan struct{} // closed at the first HasSession event
	firstOnce    sync.Once
	quit         chan struct{} // closed by Close
	quitOnce     sync.Once
	life         context.Context // cancelled by Close: bounds the janitor's calls
	endLife      context.CancelFunc
	wg           sync.WaitGroup // janitor and event drain

	// watchFires counts predecessor watches that fired in Lock: the
	// herd-effect test checks that a release wakes exactly one waiter.
	watchFires atomic.Int64
}

func newBackend(o driver.Settings, timeout time.Duration, owned bool, ensemble int) *backend {
	b := &backend{
		owned:        owned,
		base:         DefaultBasePath,
		acl:          zk.WorldACL(zk.PermAll),
		timeout:      timeout,
		logger:       o.Logger,
		firstSession: make(chan struct{}),
		quit:         make(chan struct{}),
	}
	b.life, b.endLife = context.WithCancel(context.Background())
	if p, ok := driver.BackendValue[string](o, basePathKey{}); ok {
		b.base = p
	}
	if acl, ok := driver.BackendValue[[]zk.ACL](o, aclKey{}); ok {
		b.acl = acl
	}
	if d, ok := driver.BackendValue[time.Duration](o, graceKey{}); ok {
		b.grace, b.graceSet = d, true
	}
	if n, ok := driver.BackendValue[int](o, ensembleSizeKey{}); ok {
		ensemble = n
	}
	b.sess.init(b)
	b.janitor.init(b)
	b.g = distlock.Guarantees{
		Backend:           "zookeeper",
		TokenSource:       "czxid of the lock znode (64-bit, ensemble-wide)",
		Wait:              distlock.WaitQueue,
		FIFO:              true,
		FailuresTolerated: (ensemble - 1) / 2,
		SessionTTL:        true,
		Notes: []string{
			"a lock lives as long as the Locker's session; the TTL only sets the local deadline and Refresh confirms the znode exists",
			"tolerates the loss of a minority of the ensemble ((n-1)/2 of n servers; FailuresTolerated assumes the server list is the whole ensemble)",
			"Done closes when the session expires, the connection stays down past the disconnect grace, or (Dial) the server answers nothing for 2/3 of the smallest session timeout it granted the session (which may be less than the one asked for; a restarted server or new leader restores a session with the timeout granted at its creation, even after a later connection was granted more); the server expires the session no sooner than that timeout after the last request it answered, so Done closes before another client can take the lock, with a third of the timeout to spare for timer lateness",
			"with Dial, a link whose round trip exceeds 1/3 of the session timeout cannot keep a lease: the silence bound reports it lost while the session lives (early, on the safe side)",
			"with New the backend sees neither the granted timeout nor the server's last answer: the grace (default zero) counts from go-zookeeper's disconnect event, 2/3 of go-zookeeper's timeout after the last reply arrived, and must stay under 1/3 of the session timeout; the notice is ahead of the server only while the round trip stays under 1/3 of the timeout minus the grace, and only if the session was never granted a smaller timeout than go-zookeeper's (at its creation, say): a restored session expires on that one",
			"in an ensemble, a follower cut off from the leader answers its clients for up to syncLimit*tickTime after the leader last heard of them: the notice stays ahead only if syncLimit*tickTime + tickTime/2 + min(grace, 2T/3) < 2T/3, T the session timeout; a follower that answers a ping and then freezes may never pass it on, leaving the leader's news of the session T/3 older than the client's: the silence bound then fires just as the leader can expire the session, with no margin for timer lateness",
			"a holder process paused longer than a third of the session timeout learns of the loss after the next holder is granted the lock: guard writes with the fencing token",
			"needs ZooKeeper >= 3.5.3 (container znodes reap empty key directories)",
		},
	}
	return b
}

func (b *backend) setConn(c *zk.Conn) { b.conn.Store(c) }

// disconnectGrace is the grace for a disconnection that starts now: the
// one given, or a quarter of the smallest timeout granted to the current
// session (Dial), or zero when that is unknown (New).
func (b *backend) disconnectGrace() time.Duration {
	if b.graceSet {
		return b.grace
	}
	if b.link != nil {
		return b.link.granted() / 4
	}
	return 0
}

// start runs the janitor, which deletes znodes whose owner gave up on them
// while the connection was down.
func (b *backend) start() {
	b.wg.Add(1)
	go b.janitor.run()
}

func (b *backend) Guarantees() distlock.Guarantees {
	g := b.g
	g.Notes = append([]string(nil), g.Notes...)
	return g
}

// Close stops the janitor and, if Dial made the connection, closes the
// session (which deletes every znode the Locker still has). With New, the
// janitor makes one last bounded pass and the caller's connection stays open.
func (b *backend) Close() error {
	first := false
	b.quitOnce.Do(func() { close(b.quit); first = true })
	if !first {
		return nil
	}
	b.endLife()
	b.sess.stop()
	if b.owned {
		b.conn.Load().Close()
	} else if b.janitor.pending() > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), b.cleanupTimeout())
		b.janitor.pass(ctx)
		cancel()
	}
	b.wg.Wait()
	return nil
}

// As gives access to the connection: target must be a **zk.Conn.
func (b *backend) As(target any) bool {
	switch p := target.(type) {
	case **zk.Conn:
		*p = b.conn.Load()
		return true
	case **backend: // for this package's tests
		*p = b
		return true
	}
	return false
}

// cleanupTimeout bounds the deletes made on behalf of a call whose context
// has ended.
func (b *backend) cleanupTimeout() time.Duration {
	if b.timeout > 0 {
		return min(b.timeout, 5*time.Second)
	}
	return 5 * time.Second
}

func (b *backend) log(level slog.Level, msg string, args ...any) {
	if b.logger != nil {
		b.logger.Log(context.Background(), level, "distlock: zookeeper: "+msg, args...)
	}
}

// zkLogger sends go-zookeeper's log lines to the distlock logger at debug
// level, or nowhere.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	if z.l != nil {
		z.l.Debug("distlock: zookeeper client: " + fmt.Sprintf(format, args...))
	}
}

// validBase checks a base path: absolute, not the root, no empty, "." or
// ".." segments, no trailing slash, no control characters.
func validBase(p string) error {
	if !strings.HasPrefix(p, "/") || p == "/" {
		return errors.New("must be an absolute path below the root")
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("bad segment %q", seg)
		}
	}
	if p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/") {
		return errors.New("/zookeeper is reserved")
	}
	for _, r := range p {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return errors.New("holds a control or invalid character")
		}
	}
	return nil
}
