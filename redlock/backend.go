package redlock

import (
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/redis"
)

// backend implements driver.Backend (Subscribe included) over the nodes.
type backend struct {
	driver.Unsupported
	nodes        []*node
	every        []int // 0 … len(nodes)-1, read only: all()
	prefix       string
	quorum       int
	nodeTimeout  time.Duration // 0: defaultNodeTimeout(ttl)
	closeClients bool
	unroute      func() // ends the routing of go-redis's logs (Open's clients)

	// wg tracks the node calls that outlive the operation that started
	// them (stragglers and background releases); Close waits for them,
	// and each is bounded by the node timeout.
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	// waiting holds the subscriptions of waiting Acquires (SubscribeWaiter),
	// by key and waiter, so that an attempt can tell its own subscription
	// which nodes' notices would only be its own give-backs.
	waitingMu sync.Mutex
	waiting   map[waiterID]*subscription
}

// handle is a Grant's Handle: Lease.As(*redis.Keys) reaches the lock's keys.
type handle struct {
	keys  redisnode.Keys
	value string // the holder's value (WithValue), for the holder records

	// mu guards the rest. Lease calls are serialised, but a refresh's
	// late node calls may still run when the next call starts.
	mu sync.Mutex
	// ours[i] is when the lock on node i is known to end, by the node's
	// clock less drift: the start of the last call that set or extended
	// it there, plus the TTL. Zero where it is not ours. Refresh takes
	// the lock back on nodes that lost it only while a majority have it
	// unexpired without a break; otherwise a majority was free at some
	// moment and another client could have held the key.
	ours []time.Time
	// oursSeq[i] is the refresh whose answer set ours[i]: an answer of an
	// older refresh, arriving late, does not overwrite a newer one (a
	// shorter TTL moves the expiry back).
	oursSeq []uint64
	seq     uint64 // refreshes started
	// calls are the node calls of the last refresh; Unlock waits for them
	// (bounded by the node timeout) so that none lands after the release.
	calls map[int]chan struct{}
}

// learn records node i's answer to refresh seq: the lock ours until
// until, or (zero) not ours.
func (h *handle) learn(i int, seq uint64, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq < h.oursSeq[i] {
		return
	}
	h.ours[i], h.oursSeq[i] = until, seq
}

func (h *handle) As(target any) bool {
	if p, ok := target.(*redis.Keys); ok { // an alias of redisnode.Keys
		*p = h.keys
		return true
	}
	return false
}

func (b *backend) Guarantees() driver.Guarantees {
	n := len(b.nodes)
	return driver.Guarantees{
		Backend:           "redlock",
		TokenSource:       "quorum-ordered: max of the majority's counters (each max(counter+1, server TIME in µs)), raised on a majority in phase 2",
		Wait:              driver.WaitNotify,
		FailuresTolerated: (n - 1) / 2,
		ClockDependent:    true,
		RestartLosesLocks: true,
		Notes: []string{
			fmt.Sprintf("%d nodes, quorum %d: a lock is held while a majority holds it", n, b.quorum),
			"mutual exclusion depends on bounded clock drift between the nodes; a clock jump on a node can free a lock early, and the fencing token (larger for any later majority) is then what protects the resource",
			"a node restarted without its data loses the locks it held: run nodes with appendfsync always, or keep a crashed node down for at least the longest TTL before it rejoins; held leases take the lock back on it",
			"tokens keep increasing across restarts, with or without fsync, while node clocks differ by less than a node's downtime, and by less than an hour (a counter expires an hour past the grant that raised it)",
			"waiters are woken by pub/sub release notices, not in FIFO order; a waiter beaten by \"held\" answers alone hears only those nodes, and tries again within 0.5 s",
		},
	}
}

func (b *backend) timeout(ttl time.Duration) time.Duration {
	if b.nodeTimeout > 0 {
		return b.nodeTimeout
	}
	return defaultNodeTimeout(ttl)
}

// Close waits for the node calls still running (each bounded by the node
// timeout), then stops the notifiers and, with WithCloseClients, closes the
// clients.
func (b *backend) Close() error {
	b.closeOnce.Do(func() {
		b.wg.Wait()
		b.closeErr = b.closeNodes()
		if b.unroute != nil {
			b.unroute()
		}
	})
	return b.closeErr
}

// As gives access to the node clients: target may be a
// *[]goredis.UniversalClient (a copy of the slice, in node order).
func (b *backend) As(target any) bool {
	if p, ok := target.(*[]goredis.UniversalClient); ok {
		cs := make([]goredis.UniversalClient, len(b.nodes))
		for i, nd := range b.nodes {
			cs[i] = nd.client
		}
		*p = cs
		return true
	}
	return false
}
