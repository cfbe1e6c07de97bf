package zookeeper

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/mutation"
)

// New returns a Locker on conn, a session the caller made with zk.Connect
// and still owns: Close leaves it open. Pass WithEvents so that session
// loss reaches the leases; see docs/backends/zookeeper.md for what happens
// without it, and for what New cannot see of the connection that Dial does.
func New(conn *zk.Conn, opts ...distlock.Option) (distlock.Locker, error) {
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	// Close gives back the creates still in flight within the Locker's
	// release timeout; distlock.New reports a bad one.
	release := distlock.DefaultReleaseTimeout
	if s, err := driver.ResolveLocker(driver.Settings{ReleaseTimeout: release}, "zookeeper", driver.Options(lockerOpts)); err == nil {
		release = s.ReleaseTimeout
	}
	b, err := newOnConn(conn, backendOpts, release)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, lockerOpts...) // closes b if it fails
}

// NewBackend is New's raw Backend, for wrapping (tests, middleware). It
// takes zookeeper's own options and WithLogger; the portable ones go to
// distlock.New. Its Close gives back the creates still in flight within
// distlock.DefaultReleaseTimeout.
func NewBackend(conn *zk.Conn, opts ...distlock.Option) (driver.Backend, error) {
	b, err := newOnConn(conn, driver.Options(opts), distlock.DefaultReleaseTimeout)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// newOnConn builds a backend on the caller's conn; release bounds Close.
func newOnConn(conn *zk.Conn, opts []driver.Option, release time.Duration) (*backend, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zookeeper: nil *zk.Conn", distlock.ErrInvalidOption)
	}
	o, err := driver.ResolveBackend("zookeeper", opts)
	if err != nil {
		return nil, err
	}
	if _, ok := driver.BackendValue[[]func(*zk.Conn)](o, connOptionsKey{}); ok {
		return nil, fmt.Errorf("%w: zookeeper: WithConnOptions is for Dial; New uses the caller's connection", distlock.ErrInvalidOption)
	}
	if _, ok := driver.BackendValue[auth](o, authKey{}); ok {
		return nil, fmt.Errorf("%w: zookeeper: WithAuth is for Dial; with New, call AddAuth on the *zk.Conn and pass its ACL with WithACL", distlock.ErrInvalidOption)
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
	b.release = release
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
	driver.Unsupported
	conn  atomic.Pointer[zk.Conn]
	owned bool   // Dial made conn, so Close closes it
	addr  string // the servers, as errors name them
	base  string
	acl   []zk.ACL
	auth  auth     // WithAuth's; scheme "" without
	ids   []zk.ACL // the Locker's identities, for the checks of its parents (acl.go)
	// checkACL: the Locker's own ACL is not open, so the parents it uses
	// must not be either (acl.go), unless allowOpen (WithAllowOpenACL).
	checkACL  bool
	allowOpen bool
	timeout   time.Duration // session timeout asked (Dial) or declared (New); 0 when unknown
	// release bounds Close's wait for the creates in flight and its last
	// clean-up (New): the Locker's release timeout.
	release time.Duration
	grace   time.Duration // the disconnect grace, if graceSet
	// graceSet: WithDisconnectGrace was given; else the grace derives from
	// the granted session timeout (Dial) or is zero (New).
	graceSet bool
	link     *link // Dial's view of its connections; nil with New
	// watches: the events reach onEvent through zk.WithEventCallback, in
	// order with the replies (Dial), so Refresh may trust a watch on each
	// held znode (refresh.go). With New they come late or not at all.
	watches bool
	logger  *slog.Logger
	g       driver.Guarantees

	sess    sessionState
	janitor janitor
	hub     watchHub // the key directories' watches, shared by Watch (watch.go)

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
	// refreshReads counts the znode reads of Refresh and RefreshBatch:
	// the renewal tests check that a batch costs one, not one per lease.
	refreshReads atomic.Int64
	// dirWatchFires counts the key directory watches that fired in a
	// subscription's Wait: the watch tests check that a waiter joining
	// fires one without waking Wait.
	dirWatchFires atomic.Int64
	// dirWatchReads counts the reads that set a key directory watch: the
	// watch tests check that subscriptions share them.
	dirWatchReads atomic.Int64
	// afterList, if set (by this package's tests), runs in Inspect after
	// each listing of a non-empty queue, before the holder is read.
	afterList func()
	// afterDir, if set (by this package's tests), runs in enqueue after it
	// created the key directory, before it creates the lock znode there.
	afterDir func()
}

func newBackend(o driver.Settings, timeout time.Duration, owned bool, ensemble int) *backend {
	b := &backend{
		owned:        owned,
		addr:         "zookeeper",
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
	if a, ok := driver.BackendValue[auth](o, authKey{}); ok {
		b.auth = a
		b.acl = zk.AuthACL(zk.PermAll)
		if user, password, ok := a.digest(); ok {
			b.acl = zk.DigestACL(zk.PermAll, user, password)
		}
	}
	if acl, ok := driver.BackendValue[[]zk.ACL](o, aclKey{}); ok {
		b.acl = acl
	}
	b.allowOpen = driver.BackendValueOr(o, allowOpenACLKey{}, false)
	b.ids = identities(b.acl, b.auth)
	_, open := ownOpenEntry(b.acl)
	b.checkACL = !open && !b.allowOpen
	if d, ok := driver.BackendValue[time.Duration](o, graceKey{}); ok {
		b.grace, b.graceSet = d, true
	}
	if n, ok := driver.BackendValue[int](o, ensembleSizeKey{}); ok {
		ensemble = n
	}
	b.sess.init(b)
	b.janitor.init(b)
	b.g = driver.Guarantees{
		Backend:           "zookeeper",
		TokenSource:       "czxid of the lock znode (64-bit, ensemble-wide)",
		Wait:              driver.WaitQueue,
		FIFO:              true,
		FailuresTolerated: (ensemble - 1) / 2,
		SessionTTL:        true,
		Notes: []string{
			"a lock lives as long as the Locker's session; the TTL only sets the local deadline and Refresh confirms the znode exists (with Dial through a watch on it, one round trip per batch of leases; with New one read per lease, pipelined)",
			"tolerates the loss of a minority of the ensemble ((n-1)/2 of n servers; FailuresTolerated assumes the server list is the whole ensemble)",
			"Done closes when the session expires, the connection stays down past the disconnect grace, or (Dial) the server answers nothing for 2/3 of the smallest session timeout it granted the session (which may be less than the one asked for; a restarted server or new leader restores a session with the timeout granted at its creation, even after a later connection was granted more); the server expires the session no sooner than that timeout after the last request it answered, so Done closes before another client can take the lock, with a third of the timeout to spare for timer lateness",
			"with Dial, a link whose round trip exceeds 1/3 of the session timeout cannot keep a lease: the silence bound reports it lost while the session lives (early, on the safe side)",
			"with New the backend sees neither the granted timeout nor the server's last answer: the grace (default zero) counts from go-zookeeper's disconnect event, 2/3 of go-zookeeper's timeout after the last reply arrived, and must stay under 1/3 of the session timeout; the notice is ahead of the server only while the round trip stays under 1/3 of the timeout minus the grace, and only if the session was never granted a smaller timeout than go-zookeeper's (at its creation, say): a restored session expires on that one",
			"in an ensemble, a follower cut off from the leader answers its clients for up to syncLimit*tickTime after the leader last heard of them: the notice stays ahead only if syncLimit*tickTime + tickTime/2 + min(grace, 2T/3) < 2T/3, T the session timeout; a follower that answers a ping and then freezes may never pass it on, leaving the leader's news of the session T/3 older than the client's: the silence bound then fires just as the leader can expire the session, with no margin for timer lateness",
			"a holder process paused longer than a third of the session timeout learns of the loss after the next holder is granted the lock: guard writes with the fencing token",
			"Inspect reports TTL 0 (a lock lasts as long as its holder's session) and the lock znodes queued behind the holder as Waiters; it reads from the server the session is connected to, which may lag the leader",
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
		return mutation.Pick("zk-requested-timeout", b.timeout, b.link.granted()) / 4 // mutation: zk-requested-timeout
	}
	return 0
}

// start runs the janitor, which deletes znodes whose owner gave up on them
// while the connection was down.
func (b *backend) start() {
	b.wg.Add(1)
	go b.janitor.run()
}

func (b *backend) Guarantees() driver.Guarantees {
	g := b.g
	g.Notes = append([]string(nil), g.Notes...)
	return g
}

// Close stops the janitor and, if Dial made the connection, closes the
// session (which deletes every znode the Locker still has, those of the
// creates in flight too: the closeSession follows them on the connection).
// With New the caller's session stays open, so Close waits for the creates
// in flight, whose callers gave up on them when Close ended their contexts,
// to hand their znodes to the janitor, and makes one last pass: both within
// the release timeout.
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
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), b.release)
		b.janitor.settle(ctx)
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
