// Package redlock is the Redlock backend of distlock: one lock over N
// independent Redis nodes (N odd, at least 3), held while a majority
// (quorum N/2+1) of them hold it. It serves "redlock://" URLs for
// distlock.Open and runs, on each node, the scripts and the key layout of
// the single-Redis backend (package redis), which the two packages share
// through an internal package; [distlock.Lease.As] with a *[redis.Keys]
// gives a lease's key names.
//
// # Algorithm
//
// An acquire records its start, then:
//
//  1. Phase 1 sends the acquire script (SET NX PX ttl, and INCR of that
//     node's token counter when the SET succeeded) to every node in
//     parallel, each call bounded by the node timeout (see
//     [WithNodeTimeout]), far below the TTL. It goes on as soon as a
//     quorum said yes, without waiting for the slowest nodes; it gives up
//     as soon as a quorum can no longer be reached.
//  2. The token T is the maximum of the counters of the acquired quorum.
//  3. Phase 2 runs the raise script on those nodes in parallel: "if the lock
//     still holds my owner value, raise the counter to at least T". The
//     acquire succeeds only if a majority accepted it, and only if the
//     whole attempt ended within its validity: TTL − elapsed − drift,
//     drift = TTL·factor + minimum (distlock.WithDrift).
//
// On failure the lock is released on every node, including the ones that did
// not answer (their release runs in the background once their own call
// ended, bounded by the node timeout), and TryLock reports a
// *distlock.HeldError carrying the smallest remaining TTL of the holders it
// saw when any node said the key was held — which covers a split vote, so
// the portable layer waits for a release notice or, failing that, its
// jittered fallback — or an error matching [ErrNoQuorum] naming how many
// nodes answered. A straggler that says yes after a successful acquire keeps
// the lock for this lease: Refresh and Unlock go to every node anyway.
//
// Refresh extends the lock on every node where it is ours and takes it back
// (SET, and the counter raised to the lease's token) where it is missing, so
// a lease granted by exactly a majority survives the loss of a node of it.
// It takes a node back only while a majority of the nodes have held the lock
// without a break (a node out of reach counts while the lock set there has
// not expired): otherwise a majority was free at some moment and another
// client could have held the key, and the lease is reported lost. It
// decides at quorum like an acquire; Unlock first waits, up to the node
// timeout, for the last refresh's slower calls, so that a repairing call
// does not land after the release. Refresh succeeds only when a quorum
// confirmed it within the validity; Unlock goes to every node (each release
// publishes the node's release notice) and waits for all of them, up to the
// node timeout, so that a TryAcquire right after a Release does not find the
// old lock on a slower node. Waiters subscribe to the release
// notices of every node (one pub/sub connection per node) and wake on any, once
// per burst (one release notifies from every node it held), after a random
// delay of up to 3ms so that the waiters one release woke do not all try at
// once and split the votes again.
//
// # Why the tokens increase
//
// No Redlock library offers fencing tokens; phase 2 is what makes them
// work. Say lease A got token T and its phase 2 was accepted by majority
// M. On each node of M the counter is ≥ T, and it was raised while A held
// the lock there. A later lease B is granted by a majority M′, which
// intersects M in at least one node x. On x, B's SET NX succeeded, so it
// came after A's lock on x was gone — after A's raise — and B's INCR on x
// returned more than T. B's token, the maximum over M′, is therefore larger
// than T. A node where A's raise was refused (the lock had expired or
// someone else held it) is simply not in M.
//
// If x restarted without persistence in between, or from an older snapshot,
// its counter is missing or stale. The acquire script therefore takes
// max(counter + 1, x's clock in microseconds) as x's token: every counter
// grows by one per grant, far slower than a microsecond clock, so x's clock
// is past T as long as the nodes' clocks differ by less than the time x was
// down. That holds for rolling restarts, for restarts from snapshots and
// for restarted nodes meeting nodes that missed grants (all tested),
// without fsync.
//
// # Assumptions and guarantees
//
// Mutual exclusion needs bounded clock drift: each node expires the lock by
// its own clock, and a clock that jumps forward on a node of the holder's
// majority can free the lock early there, letting a second client form a
// majority. The fencing token still protects a resource that checks it:
// the second client's majority meets the first one's phase-2 majority, so
// its token is larger (tested by emulating the jump with a DEL on one node).
//
// Mutual exclusion also needs nodes that do not lose a held lock: a node
// restarted without appendfsync always forgets it. Either run the nodes with
// fsync, or keep a crashed node down for at least the longest TTL in use
// (the "delayed restart" of the Redlock description), during which it is
// one of the ⌊(N−1)/2⌋ failures tolerated; a held lease takes the lock back
// on it when it returns. The token order needs neither, only the clock bound
// above. The counters never expire; a maxmemory-policy of allkeys-* could
// evict them (this backend does not check the policy; see package redis).
//
// A node call, once sent, runs to its answer or the node timeout whatever
// its caller does, and its answer still updates what the lease knows. A
// release leaves a tombstone of the lease's owner value on every node it
// reaches, for one TTL, which a late acquire or repairing refresh of that
// lease honours, so such a straggler cannot set the lock again after the
// release. A node that is paused (not dead) when the release is sent can
// still run a request buffered in its socket when it resumes: the lock then
// sits on that one node, a minority, until its TTL.
//
// Waiters are woken by release notices, not in FIFO order.
//
// Clients should set ContextTimeoutEnabled so that context deadlines bound
// socket reads; this backend also stops waiting for a node after the node
// timeout whatever its client does.
package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/redis"
)

func init() {
	driver.Register("redlock", open)
}

// ErrNoQuorum is matched by the error of an acquire, refresh or release that
// could not reach a quorum of nodes; the message says how many answered.
var ErrNoQuorum = errors.New("redlock: no quorum of nodes")

type (
	prefixKey       struct{}
	nodeTimeoutKey  struct{}
	closeClientsKey struct{}
)

// MaxNodeTimeout bounds WithNodeTimeout, so that Close, which waits for calls
// still running on slow nodes, stays bounded too.
const MaxNodeTimeout = 10 * time.Second

// WithKeyPrefix sets the prefix of every key and channel on every node
// (default redis.DefaultPrefix, so Redlock and single-Redis Lockers on the
// same server use the same keys). It must not contain '{' or '}'.
func WithKeyPrefix(prefix string) distlock.Option {
	if strings.ContainsAny(prefix, "{}") {
		return driver.InvalidOption("redlock: key prefix %q contains a brace", prefix)
	}
	return driver.BackendOption("redlock", "WithKeyPrefix", prefixKey{}, prefix)
}

// WithNodeTimeout bounds each call to one node (0 < d ≤ MaxNodeTimeout).
// The default is TTL/10 capped at 200ms: far below the TTL, so that a slow
// or dead node costs little validity, and well above a healthy round trip
// (including a first call that dials and loads the scripts). A node slower
// than this counts as not answering. A successful acquire does not wait for
// it: only failures and stragglers' background calls last this long.
func WithNodeTimeout(d time.Duration) distlock.Option {
	if d <= 0 || d > MaxNodeTimeout {
		return driver.InvalidOption("redlock: node timeout %v (want 0 < d <= %v)", d, MaxNodeTimeout)
	}
	return driver.BackendOption("redlock", "WithNodeTimeout", nodeTimeoutKey{}, d)
}

// WithCloseClients makes Close also close the node clients (default: the
// caller owns them). Lockers from distlock.Open always close theirs.
func WithCloseClients(on bool) distlock.Option {
	return driver.BackendOption("redlock", "WithCloseClients", closeClientsKey{}, on)
}

// defaultNodeTimeout is the node timeout for a TTL when none is set.
func defaultNodeTimeout(ttl time.Duration) time.Duration {
	return max(min(ttl/10, 200*time.Millisecond), time.Millisecond)
}

// New returns a Locker over clients, one per independent Redis node (an odd
// number, at least 3). Close does not close the clients unless
// WithCloseClients(true).
func New(clients []goredis.UniversalClient, opts ...distlock.Option) (distlock.Locker, error) {
	b, err := newBackend(clients, opts)
	if err != nil {
		return nil, err
	}
	l, err := distlock.New(b, opts...)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return l, nil
}

// NewBackend returns the raw Backend over clients, for wrapping (tests,
// middleware) before passing it to distlock.New. It takes the same options
// as New; pass the drift options to distlock.New as well.
func NewBackend(clients []goredis.UniversalClient, opts ...distlock.Option) (driver.Backend, error) {
	return newBackend(clients, opts)
}

func newBackend(clients []goredis.UniversalClient, opts []distlock.Option) (*backend, error) {
	n := len(clients)
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("%w: redlock: %d nodes (want an odd number, at least 3)", distlock.ErrInvalidOption, n)
	}
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("%w: redlock: client %d is nil", distlock.ErrInvalidOption, i)
		}
	}
	o, err := driver.Resolve(driver.Defaults(), "redlock", opts)
	if err != nil {
		return nil, err
	}
	prefix := driver.BackendValueOr[string](o, prefixKey{}, redis.DefaultPrefix)
	nt, _ := driver.BackendValue[time.Duration](o, nodeTimeoutKey{})
	closeClients, _ := driver.BackendValue[bool](o, closeClientsKey{})
	b := &backend{
		prefix: prefix, quorum: n/2 + 1, nodeTimeout: nt, closeClients: closeClients,
		settings: o,
	}
	for _, c := range clients {
		b.nodes = append(b.nodes, &node{client: c, notifier: redisnode.NewNotifier(c, prefix)})
	}
	return b, nil
}

// node is one Redis server of the set.
type node struct {
	client   goredis.UniversalClient
	notifier *redisnode.Notifier
}

// open is the Opener of redlock:// URLs:
//
//	redlock://[user:password@]host1:port,host2:port,host3:port[/db]?prefix=app:&node_timeout=20ms
//
// Parameters: prefix (WithKeyPrefix), node_timeout (WithNodeTimeout),
// dial_timeout (go-redis's, default 1s); the user, password and db apply to
// every node. Anything else is an error. Open PINGs every node (bounded by
// the dial timeout and ctx) and fails with an error matching ErrUnavailable,
// naming the nodes, when fewer than a majority answer.
func open(ctx context.Context, u *url.URL, opts []distlock.Option) (driver.Backend, error) {
	q := driver.NewQuery(u)
	var bopts []distlock.Option
	if p, ok := q.String("prefix"); ok {
		bopts = append(bopts, WithKeyPrefix(p))
	}
	if d, ok := q.Duration("node_timeout"); ok {
		bopts = append(bopts, WithNodeTimeout(d))
	}
	dial := time.Second
	if d, ok := q.Duration("dial_timeout"); ok {
		if d <= 0 {
			return nil, fmt.Errorf("%w: dial_timeout=%v must be positive", distlock.ErrInvalidURL, d)
		}
		dial = d
	}
	if err := q.Done(); err != nil {
		return nil, err
	}
	db := 0
	if p := strings.Trim(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: redlock: database %q is not a number", distlock.ErrInvalidURL, p)
		}
		db = n
	}
	var user, pass string
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	var clients []goredis.UniversalClient
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for _, h := range strings.Split(u.Host, ",") {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			closeAll()
			return nil, fmt.Errorf("%w: redlock: node %q is not host:port", distlock.ErrInvalidURL, h)
		}
		clients = append(clients, goredis.NewClient(&goredis.Options{
			Addr: h, Username: user, Password: pass, DB: db,
			DialTimeout: dial, ContextTimeoutEnabled: true,
		}))
	}
	opts = append(append(bopts, opts...), WithCloseClients(true))
	if _, err := driver.Resolve(driver.Settings{}, "redlock", opts); err != nil {
		closeAll()
		return nil, err // before dialling
	}
	if err := pingQuorum(ctx, clients, dial); err != nil {
		closeAll()
		return nil, err
	}
	b, err := newBackend(clients, opts)
	if err != nil {
		closeAll()
		return nil, err
	}
	return b, nil
}

// pingQuorum checks that a majority of the nodes answer a PING within dial.
func pingQuorum(ctx context.Context, clients []goredis.UniversalClient, dial time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Ping(ctx).Err()
		}()
	}
	wg.Wait()
	var failed []error
	var addrs []string
	for i, err := range errs {
		if err != nil {
			addr := clients[i].(*goredis.Client).Options().Addr
			addrs = append(addrs, addr)
			failed = append(failed, fmt.Errorf("%s: %w", addr, err))
		}
	}
	if len(failed) > len(clients)/2 {
		return driver.Unavailable(strings.Join(addrs, ","),
			fmt.Errorf("%d of %d nodes did not answer: %w", len(failed), len(clients), errors.Join(failed...)))
	}
	return nil
}

// closeNodes stops the notifiers and, with WithCloseClients, the clients.
func (b *backend) closeNodes() error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, nd := range b.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := nd.notifier.Close()
			if b.closeClients {
				err = errors.Join(err, nd.client.Close())
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
