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
//   - the session expires: every lease of the session is lost; or
//   - the connection has been down for the disconnect grace (see
//     WithDisconnectGrace; default a quarter of the session timeout). The
//     client notices a silent server only after two thirds of the session
//     timeout, so by grace's end the server may be about to expire the
//     session and hand the lock to the next waiter. A lease reported lost
//     this way whose session survives is deleted on reconnection.
//
// While the connection is down but within the grace, the lease is at risk
// and Done stays open. go-zookeeper pauses about a second before it retries
// a server list it has gone through, so with a single server (or short
// session timeouts) a grace under a second turns every reconnection into a
// reported loss. These signals need the session's events: [Dial]
// receives them itself; with [New] pass the event channel from zk.Connect
// through [WithEvents]. Without events Done closes only when a Refresh
// (Do and WithAutoRenew refresh every TTL/3) finds the znode gone.
//
// It requires ZooKeeper 3.5.3 or newer (container znodes).
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
)

func init() {
	distlock.Register("zk", openURL)
}

// openURL implements zk://host:port,host:port/base/path?session_timeout=10s.
func openURL(ctx context.Context, u *url.URL, opts ...distlock.Option) (distlock.Locker, error) {
	q := distlock.NewQuery(u)
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
	return Dial(ctx, strings.Split(u.Host, ","), append(urlOpts, opts...)...)
}

// Defaults.
const (
	// DefaultBasePath is the znode under which locks live.
	DefaultBasePath = "/distlock"
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
// (default 10s; the server clamps it into its own [min, max] range, which
// must include it for the disconnect grace to be right). With New, pass the
// timeout the *zk.Conn was made with: it sets the default disconnect grace.
func WithSessionTimeout(d time.Duration) distlock.Option {
	if d <= 0 || d > distlock.MaxTTL {
		return distlock.InvalidOption("zookeeper: session timeout %v out of range", d)
	}
	return distlock.BackendOption(sessionTimeoutKey{}, d)
}

// WithDisconnectGrace sets how long the connection may stay down before the
// session's leases are reported lost. Default: a quarter of the session
// timeout with Dial, or with New and WithSessionTimeout; zero with New
// otherwise. Zero reports the loss at the first disconnect, as Curator
// recommends for locks. Values of a third of the session timeout or more
// let the server expire the session before Done closes.
func WithDisconnectGrace(d time.Duration) distlock.Option {
	if d < 0 {
		return distlock.InvalidOption("zookeeper: disconnect grace %v is negative", d)
	}
	return distlock.BackendOption(graceKey{}, d)
}

// WithBasePath sets the znode under which locks live (default "/distlock"):
// an absolute path, not the root, without a trailing slash. Missing
// ancestors are created as persistent znodes.
func WithBasePath(p string) distlock.Option {
	if err := validBase(p); err != nil {
		return distlock.InvalidOption("zookeeper: base path %q: %v", p, err)
	}
	return distlock.BackendOption(basePathKey{}, p)
}

// WithEvents hands New the event channel that zk.Connect returned with the
// *zk.Conn. The Locker then drains it (do not read it elsewhere) and learns
// of disconnections and session expiry, which close lost leases' Done.
func WithEvents(ch <-chan zk.Event) distlock.Option {
	if ch == nil {
		return distlock.InvalidOption("zookeeper: nil event channel")
	}
	return distlock.BackendOption(eventsKey{}, ch)
}

// WithConnOptions passes options such as zk.WithLogger or zk.WithDialer to
// the zk.Connect that Dial makes. By default Dial sends the client's log
// lines to the distlock logger (WithLogger) at debug level. Dial installs
// its own zk.WithEventCallback after these options, replacing any given
// here: to see the events yourself, connect with zk.Connect and use New.
func WithConnOptions(opts ...func(*zk.Conn)) distlock.Option {
	for _, o := range opts {
		if o == nil {
			return distlock.InvalidOption("zookeeper: nil connection option")
		}
	}
	return distlock.BackendOption(connOptionsKey{}, opts)
}

// WithACL sets the ACL of the znodes the Locker creates (default
// zk.WorldACL(zk.PermAll)).
func WithACL(acl []zk.ACL) distlock.Option {
	if len(acl) == 0 {
		return distlock.InvalidOption("zookeeper: empty ACL")
	}
	return distlock.BackendOption(aclKey{}, acl)
}

// WithEnsembleSize declares how many servers the ensemble has, for
// Guarantees().FailuresTolerated ((n−1)/2). Dial counts its server list by
// default; New assumes a standalone server unless told.
func WithEnsembleSize(n int) distlock.Option {
	if n < 1 {
		return distlock.InvalidOption("zookeeper: ensemble size %d", n)
	}
	return distlock.BackendOption(ensembleSizeKey{}, n)
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
// and still owns: Close leaves it open. Pass WithEvents (and
// WithSessionTimeout) so that session loss reaches the leases; see the
// package documentation for what happens without them.
func New(conn *zk.Conn, opts ...distlock.Option) (distlock.Locker, error) {
	b, err := NewBackend(conn, opts...)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, opts...) // closes b if it fails
}

// DialBackend is Dial's raw Backend, for wrapping (tests, middleware).
func DialBackend(ctx context.Context, servers []string, opts ...distlock.Option) (distlock.Backend, error) {
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
	o, err := distlock.ResolveOptions(opts...)
	if err != nil {
		return nil, err
	}
	if _, ok := distlock.BackendValue[<-chan zk.Event](o, eventsKey{}); ok {
		return nil, fmt.Errorf("%w: zookeeper: WithEvents is for New; Dial receives the events itself", distlock.ErrInvalidOption)
	}
	timeout := DefaultSessionTimeout
	if d, ok := distlock.BackendValue[time.Duration](o, sessionTimeoutKey{}); ok {
		timeout = d
	}
	b := newBackend(o, timeout, true, len(servers))

	connOpts := []func(*zk.Conn){zk.WithLogger(zkLogger{o.Logger}), zk.WithLogInfo(false)}
	if extra, ok := distlock.BackendValue[[]func(*zk.Conn)](o, connOptionsKey{}); ok {
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
	select {
	case <-b.firstSession:
	case <-ctx.Done():
		b.quitOnce.Do(func() { close(b.quit); b.endLife() })
		go conn.Close() // may wait a second for a closeSession that cannot be sent
		return nil, fmt.Errorf("zookeeper: no session with %s: %w", strings.Join(servers, ","), ctx.Err())
	}
	b.start()
	return b, nil
}

// NewBackend is New's raw Backend, for wrapping (tests, middleware).
func NewBackend(conn *zk.Conn, opts ...distlock.Option) (distlock.Backend, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zookeeper: nil *zk.Conn", distlock.ErrInvalidOption)
	}
	o, err := distlock.ResolveOptions(opts...)
	if err != nil {
		return nil, err
	}
	if _, ok := distlock.BackendValue[[]func(*zk.Conn)](o, connOptionsKey{}); ok {
		return nil, fmt.Errorf("%w: zookeeper: WithConnOptions is for Dial; New uses the caller's connection", distlock.ErrInvalidOption)
	}
	timeout, _ := distlock.BackendValue[time.Duration](o, sessionTimeoutKey{}) // 0: unknown
	size := 1
	if n, ok := distlock.BackendValue[int](o, ensembleSizeKey{}); ok {
		size = n
	}
	b := newBackend(o, timeout, false, size)
	b.setConn(conn)
	if ch, ok := distlock.BackendValue[<-chan zk.Event](o, eventsKey{}); ok {
		b.wg.Add(1)
		go b.drain(ch)
	}
	b.start()
	return b, nil
}

// backend implements distlock.Backend and distlock.Blocker.
type backend struct {
	conn    atomic.Pointer[zk.Conn]
	owned   bool // Dial made conn, so Close closes it
	base    string
	acl     []zk.ACL
	timeout time.Duration // session timeout; 0 when unknown (New without WithSessionTimeout)
	grace   time.Duration
	logger  *slog.Logger
	g       distlock.Guarantees

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

func newBackend(o distlock.Options, timeout time.Duration, owned bool, ensemble int) *backend {
	b := &backend{
		owned:        owned,
		base:         DefaultBasePath,
		acl:          zk.WorldACL(zk.PermAll),
		timeout:      timeout,
		grace:        timeout / 4,
		logger:       o.Logger,
		firstSession: make(chan struct{}),
		quit:         make(chan struct{}),
	}
	b.life, b.endLife = context.WithCancel(context.Background())
	if p, ok := distlock.BackendValue[string](o, basePathKey{}); ok {
		b.base = p
	}
	if acl, ok := distlock.BackendValue[[]zk.ACL](o, aclKey{}); ok {
		b.acl = acl
	}
	if d, ok := distlock.BackendValue[time.Duration](o, graceKey{}); ok {
		b.grace = d
	}
	if n, ok := distlock.BackendValue[int](o, ensembleSizeKey{}); ok {
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
			"Done closes when the session expires or the connection stays down past the disconnect grace (default a quarter of the session timeout)",
			"needs ZooKeeper >= 3.5.3 (container znodes reap empty key directories)",
		},
	}
	return b
}

func (b *backend) setConn(c *zk.Conn) { b.conn.Store(c) }

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
