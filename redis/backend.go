package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

// backend implements driver.Backend, with release notices.
type backend struct {
	driver.Unsupported
	client      goredis.UniversalClient
	addr        string // names the server in errors (never a secret)
	prefix      string
	wait        waitSetting
	fair        time.Duration // the hand-off window of WithFairQueue; 0: no queue
	closeClient bool
	notifier    *redisnode.Notifier
	unroute     func() // ends the routing of go-redis's logs (Open's clients)

	closeOnce sync.Once
	closeErr  error
}

// Keys names the Redis keys of one lock; Lease.As fills one in for a lease
// of this backend or of package redlock:
//
//	var k redis.Keys
//	if lease.As(&k) {
//		// k.Lock, k.Counter, k.Channel
//	}
//
// Lock is the lock key (the owner value, with a PX expiry), Counter the
// fencing-token counter (expiring an hour past its last lock), Holder the holder record (owner,
// token and value, expiring with the lock) and Channel the pub/sub channel
// of release notices; see "Key layout" in docs/backends/redis.md. Its
// other fields name short-lived keys of the scripts. Keys is an alias of
// the type the node scripts share with package redlock, so one Keys serves
// both.
type Keys = redisnode.Keys

// handle is a Grant's Handle: Lease.As(*Keys) reaches the lock's keys.
type handle struct {
	keys      Keys
	withValue bool // taken with a value: refreshes extend the holder record too
	// refreshes numbers the lease's refreshes in the order they are sent
	// (the portable layer sends one at a time), so that a late copy of an
	// older one changes nothing on the server.
	refreshes atomic.Uint64
}

// nextRefresh is the sequence number of g's next refresh.
func nextRefresh(g driver.Grant) uint64 {
	if h, ok := g.Handle.(*handle); ok {
		return h.refreshes.Add(1)
	}
	return 1
}

// withValue reports whether g's lock was taken with a value (so it has a
// holder record to extend).
func withValue(g driver.Grant) bool {
	h, ok := g.Handle.(*handle)
	return ok && h.withValue
}

func (h *handle) As(target any) bool {
	if p, ok := target.(*Keys); ok {
		*p = h.keys
		return true
	}
	return false
}

var guarantees = driver.Guarantees{
	Backend:           "redis",
	TokenSource:       "per-key counter, advanced to max(counter+1, server TIME in µs) in the same Lua script as SET NX PX, expiring an hour past its last lock",
	Wait:              driver.WaitNotify,
	FailuresTolerated: 0,
	ClockDependent:    true,
	RestartLosesLocks: true,
	Notes: []string{
		"the server expires a lock by its wall clock, the lease's deadline runs on the client's: a server clock stepped forward, or a client host suspended past the TTL, can free a held lock early",
		"a failover to a lagging replica, or a restart without appendfsync always, can lose held locks; WithWaitReplicas runs WAIT after each acquire and refresh to narrow the failover window",
		"tokens still increase across restarts and failovers while server clocks differ by less than the restart or failover takes (a lost or lagging counter restarts from the server's clock in µs), and across a counter's expiry an hour past its last lock while the clock does not step back by more than that",
		"maxmemory-policy allkeys-* can evict the token counter; the backend warns, or refuses with WithEvictionCheck(EvictionRefuse)",
		"waiting Acquires that find the lock held queue in the order they came, and a release wakes only the first, which has the hand-off window to take it; with WithoutFairQueue every release wakes all waiters and they race (TryAcquire takes a free lock regardless)",
	},
}

func (b *backend) Guarantees() driver.Guarantees {
	g := guarantees
	g.Notes = append([]string(nil), guarantees.Notes...)
	g.FIFO = b.fair > 0
	return g
}

func (b *backend) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	k := redisnode.KeysFor(b.prefix, req.Key)
	var (
		r   redisnode.AcquireResult
		err error
	)
	if b.wait.n > 0 {
		err = b.onConn(ctx, k, func(c *goredis.Conn) error {
			var err error
			if r, err = b.acquireOn(ctx, c, k, req); err != nil || !r.Acquired {
				return err
			}
			if err := b.waitReplicas(ctx, c); err != nil {
				// Not durable enough: give the lock back rather than hand
				// out a token that a failover could repeat.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				_, _ = redisnode.ReleaseFairOn(rctx, c, k, req.Owner, redisnode.GiveBackTombstone(req.TTL), req.Value != "", b.handOffWindow())
				cancel()
				return err
			}
			return nil
		})
	} else {
		r, err = b.acquireOn(ctx, b.client, k, req)
	}
	if err != nil {
		return driver.Grant{}, b.classify(err)
	}
	if !r.Acquired {
		return driver.Grant{}, &distlock.HeldError{Key: req.Key, RetryAfter: max(r.HolderTTL, 0)}
	}
	return driver.Grant{Token: int64(r.Token), Handle: &handle{keys: k, withValue: req.Value != ""}}, nil
}

// handOffWindow is the window a release gives the first waiter of the key's
// fair queue. A Locker without the queue wakes that waiter too (other
// Lockers on the same keys may keep one) but cuts no place: the window is
// the waiters' choice, which it does not know.
func (b *backend) handOffWindow() time.Duration {
	if b.fair > 0 {
		return b.fair
	}
	return wakeOnly
}

// wakeOnly is a window longer than any place lasts: the release script
// only shortens a place (ZADD LT), so the head is woken and keeps its own
// deadline.
const wakeOnly = 24 * time.Hour

// acquireOn runs one attempt on c: in the fair queue when there is one and
// the attempt is a waiting Acquire's.
func (b *backend) acquireOn(ctx context.Context, c redisnode.Doer, k Keys, req driver.Request) (redisnode.AcquireResult, error) {
	if b.fair > 0 && req.Waiter != "" {
		return redisnode.AcquireFairOn(ctx, c, k, req.Owner, req.TTL, req.Value, req.Waiter, b.fair)
	}
	return redisnode.AcquireOn(ctx, c, k, req.Owner, req.TTL, req.Value)
}

// Dequeue implements driver.Backend.Dequeue: a waiting Acquire that ended without
// the lock leaves the fair queue (nothing to do without one).
func (b *backend) Dequeue(ctx context.Context, key, waiter string) error {
	if b.fair == 0 {
		return nil
	}
	_, err := redisnode.DequeueOn(ctx, b.client, redisnode.KeysFor(b.prefix, key), waiter)
	return b.classify(err)
}

// classify makes a refusal of the server match distlock.ErrAccessDenied.
func (b *backend) classify(err error) error { return redisnode.Classify(b.addr, err) }

func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	k := redisnode.KeysFor(b.prefix, g.Key)
	var (
		ok  bool
		err error
	)
	seq := nextRefresh(g)
	if b.wait.n > 0 {
		err = b.onConn(ctx, k, func(c *goredis.Conn) error {
			var err error
			if ok, err = redisnode.RefreshOn(ctx, c, k, g.Owner, ttl, withValue(g), seq); err != nil || !ok {
				return err
			}
			return b.waitReplicas(ctx, c)
		})
	} else {
		ok, err = redisnode.RefreshOn(ctx, b.client, k, g.Owner, ttl, withValue(g), seq)
	}
	switch {
	case err != nil:
		return 0, b.classify(err)
	case !ok:
		return 0, distlock.ErrNotHeld
	}
	return ttl, nil
}

// RefreshBatch refreshes many locks in one pipeline (driver.Backend.RefreshBatch).
// It declines with WithWaitReplicas (each refresh needs its own WAIT) and on
// a sharded client: a pipeline there waits for every shard, so one stalled
// shard would cost the leases on the healthy ones.
func (b *backend) RefreshBatch(ctx context.Context, batch []driver.Refresh) error {
	switch b.client.(type) {
	case *goredis.ClusterClient, *goredis.Ring:
		return driver.ErrUnsupported
	}
	if b.wait.n > 0 {
		return driver.ErrUnsupported
	}
	locks := make([]redisnode.Refresh, len(batch))
	for i, r := range batch {
		locks[i] = redisnode.Refresh{Keys: redisnode.KeysFor(b.prefix, r.Grant.Key), Owner: r.Grant.Owner, TTL: r.TTL,
			WithValue: withValue(r.Grant), Seq: nextRefresh(r.Grant)}
	}
	ok, errs := redisnode.RefreshManyOn(ctx, b.client, locks)
	for i := range batch {
		switch {
		case errs[i] != nil:
			batch[i].Err = b.classify(errs[i])
		case !ok[i]:
			batch[i].Err = distlock.ErrNotHeld
		default:
			batch[i].Validity = batch[i].TTL
		}
	}
	return nil
}

func (b *backend) Unlock(ctx context.Context, g driver.Grant) error {
	// The tombstone refuses a late copy of the lease's acquire, and tells a
	// resent release what the first copy did. An attempt given back because
	// its reply was lost (no Handle) has no known value, so its holder
	// record goes too.
	tomb := redisnode.MaxLate
	if g.Handle == nil {
		tomb = redisnode.GiveBackTombstone(g.TTL)
	}
	var k Keys
	if h, ok := g.Handle.(*handle); ok {
		k = h.keys
	} else {
		k = redisnode.KeysFor(b.prefix, g.Key)
	}
	ok, err := redisnode.ReleaseFairOn(ctx, b.client, k, g.Owner, tomb, g.Handle == nil || withValue(g), b.handOffWindow())
	switch {
	case err != nil:
		return b.classify(err)
	case !ok && g.Handle == nil:
		// A give-back that found nothing: the tombstone now refuses the
		// attempt if it lands later, so there is nothing to ask again.
		return nil
	case !ok:
		return distlock.ErrNotHeld
	}
	return nil
}

// Subscribe is driver.Backend's Subscribe: the release notices of key,
// through the Locker's one pub/sub connection.
func (b *backend) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	return b.notifier.Subscribe(ctx, key)
}

// SubscribeWaiter implements driver.Backend.SubscribeWaiter: in a fair queue a
// release notice names the first waiter, and wakes only it.
func (b *backend) SubscribeWaiter(ctx context.Context, key, waiter string) (driver.Subscription, error) {
	if b.fair == 0 {
		waiter = ""
	}
	return b.notifier.SubscribeWaiter(ctx, key, waiter)
}

// onConn runs fn on one connection to the master that owns k, so that a
// WAIT sent on it counts the script's write.
func (b *backend) onConn(ctx context.Context, k Keys, fn func(*goredis.Conn) error) error {
	var c *goredis.Client
	switch cl := b.client.(type) {
	case *goredis.Client:
		c = cl
	case *goredis.ClusterClient:
		m, err := cl.MasterForKey(ctx, k.Lock)
		if err != nil {
			return fmt.Errorf("cluster master for %q: %w", k.Lock, err)
		}
		c = m
	default: // ruled out by newBackend
		return fmt.Errorf("WAIT needs a *redis.Client or *redis.ClusterClient, not %T", b.client)
	}
	conn := c.Conn()
	defer conn.Close()
	return fn(conn)
}

func (b *backend) waitReplicas(ctx context.Context, c *goredis.Conn) error {
	got, err := c.Wait(ctx, b.wait.n, b.wait.timeout).Result()
	if err != nil {
		return fmt.Errorf("WAIT %d %v: %w", b.wait.n, b.wait.timeout, err)
	}
	if got < int64(b.wait.n) {
		return fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, got, b.wait.n, b.wait.timeout)
	}
	return nil
}

// Close stops the notifier and, with WithCloseClient, closes the client.
func (b *backend) Close() error {
	b.closeOnce.Do(func() {
		b.closeErr = b.notifier.Close()
		if b.closeClient {
			b.closeErr = errors.Join(b.closeErr, b.client.Close())
		}
		if b.unroute != nil {
			b.unroute()
		}
	})
	return b.closeErr
}

// As gives access to the client: target may be a *goredis.UniversalClient,
// a **goredis.Client or a **goredis.ClusterClient (when the client is one).
func (b *backend) As(target any) bool {
	switch p := target.(type) {
	case *goredis.UniversalClient:
		*p = b.client
		return true
	case **goredis.Client:
		c, ok := b.client.(*goredis.Client)
		if ok {
			*p = c
		}
		return ok
	case **goredis.ClusterClient:
		c, ok := b.client.(*goredis.ClusterClient)
		if ok {
			*p = c
		}
		return ok
	}
	return false
}
