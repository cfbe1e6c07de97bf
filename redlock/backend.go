package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/redis"
)

// backend implements driver.Backend and driver.Notifier over the nodes.
type backend struct {
	driver.NoQueue
	nodes        []*node
	prefix       string
	quorum       int
	nodeTimeout  time.Duration // 0: defaultNodeTimeout(ttl)
	closeClients bool
	settings     driver.Settings // for the drift allowance: the portable layer's formula

	// wg tracks the node calls that outlive the operation that started
	// them (stragglers and background releases); Close waits for them,
	// and each is bounded by the node timeout.
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// handle is a Grant's Handle: Lease.As(*redis.Keys) reaches the lock's keys.
type handle struct {
	keys redisnode.Keys

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

func (b *backend) Guarantees() distlock.Guarantees {
	n := len(b.nodes)
	return distlock.Guarantees{
		Backend:           "redlock",
		TokenSource:       "quorum-ordered: max of the majority's counters (each max(counter+1, server TIME in µs)), raised on a majority in phase 2",
		Wait:              distlock.WaitNotify,
		FailuresTolerated: (n - 1) / 2,
		ClockDependent:    true,
		RestartLosesLocks: true,
		Notes: []string{
			fmt.Sprintf("%d nodes, quorum %d: a lock is held while a majority holds it", n, b.quorum),
			"mutual exclusion depends on bounded clock drift between the nodes; a clock jump on a node can free a lock early, and the fencing token (larger for any later majority) is then what protects the resource",
			"a node restarted without its data loses the locks it held: run nodes with appendfsync always, or keep a crashed node down for at least the longest TTL before it rejoins; held leases take the lock back on it",
			"tokens keep increasing across restarts, with or without fsync, while node clocks differ by less than a node's downtime",
			"waiters are woken by pub/sub release notices from any node, not in FIFO order",
		},
	}
}

func (b *backend) timeout(ttl time.Duration) time.Duration {
	if b.nodeTimeout > 0 {
		return b.nodeTimeout
	}
	return defaultNodeTimeout(ttl)
}

func (b *backend) drift(ttl time.Duration) time.Duration { return b.settings.Drift(ttl) }

// reply is one node's answer: ok is the call's yes/no, err a failure to
// reach or use the node (a timeout included).
type reply struct {
	i   int
	ok  bool
	err error
}

// fanOut calls fn on each node of idx in parallel, each call bounded by nt
// (not by ctx),
// and returns the channel the replies arrive on (buffered: a straggler never
// blocks) and one channel per node, closed when its goroutine is done —
// after then(reply) when then is not nil.
func (b *backend) fanOut(ctx context.Context, idx []int, nt time.Duration,
	fn func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error), then func(reply)) (<-chan reply, map[int]chan struct{}) {
	ch := make(chan reply, len(idx))
	dones := make(map[int]chan struct{}, len(idx))
	for _, i := range idx {
		done := make(chan struct{})
		dones[i] = done
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer close(done)
			// A call once sent runs to its answer or the node timeout even
			// if the caller stops waiting: its answer still updates what
			// the attempt or lease knows, and a release follows it.
			nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nt)
			ok, err := fn(nctx, i, b.nodes[i].client)
			cancel()
			r := reply{i: i, ok: ok, err: err}
			ch <- r
			if then != nil {
				then(r)
			}
		}()
	}
	return ch, dones
}

// tally is what gather collected.
type tally struct {
	yes, no  []int         // nodes that answered yes / no
	failed   map[int]error // nodes whose call failed
	answered map[int]bool  // every node that answered (yes, no or failed)
	silent   int           // nodes that did not answer in time
	ctxErr   error         // ctx ended before a decision
}

func (t *tally) add(r reply) {
	t.answered[r.i] = true
	switch {
	case r.err != nil:
		t.failed[r.i] = r.err
	case r.ok:
		t.yes = append(t.yes, r.i)
	default:
		t.no = append(t.no, r.i)
	}
}

// gather reads up to total replies. With need > 0 it stops early once need
// nodes said yes, or once need yeses can no longer be reached. It stops
// anyway when all answered, ctx ended or the deadline passed (a backstop
// for clients whose calls ignore context deadlines).
func gather(ctx context.Context, ch <-chan reply, total, need int, deadline time.Time) tally {
	t := tally{failed: map[int]error{}, answered: map[int]bool{}}
	t.read(ctx, ch, total, need, deadline)
	return t
}

// rest goes on reading replies until every node answered, ctx ended or
// the deadline passed.
func (t *tally) rest(ctx context.Context, ch <-chan reply, total int, deadline time.Time) {
	t.read(ctx, ch, total, 0, deadline)
}

func (t *tally) read(ctx context.Context, ch <-chan reply, total, need int, deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for len(t.answered) < total {
		if need > 0 && (len(t.yes) >= need || len(t.yes)+total-len(t.answered) < need) {
			break
		}
		select {
		case r := <-ch:
			t.add(r)
			continue
		case <-ctx.Done():
			t.ctxErr = ctx.Err()
		case <-timer.C:
		}
		break
	}
	t.silent = total - len(t.answered)
}

// deadline is when gather stops waiting for calls bounded by nt.
func deadline(nt time.Duration) time.Time {
	return time.Now().Add(nt + max(nt/4, 2*time.Millisecond))
}

// summary describes the failed and silent nodes of t for an error message.
func (b *backend) summary(t tally) string {
	var parts []string
	for i := range b.nodes {
		if err, ok := t.failed[i]; ok {
			parts = append(parts, fmt.Sprintf("node %d: %v", i, err))
		}
	}
	if t.silent > 0 {
		parts = append(parts, fmt.Sprintf("%d node(s) did not answer in time", t.silent))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func (b *backend) all() []int {
	idx := make([]int, len(b.nodes))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func (b *backend) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	start := time.Now()
	k := redisnode.KeysFor(b.prefix, req.Key)
	nt := b.timeout(req.TTL)
	n := len(b.nodes)

	// Phase 1. Each node's goroutine waits for the decision and, if the
	// attempt failed, releases its node unless the node said "held" (so
	// nothing of ours is there).
	results := make([]redisnode.AcquireResult, n) // written before the reply is sent
	decided := make(chan struct{})
	var failed atomic.Bool
	var once sync.Once
	decide := func(ok bool) {
		once.Do(func() {
			failed.Store(!ok)
			close(decided)
		})
	}
	defer decide(false) // any early return is a failure
	ch, dones := b.fanOut(ctx, b.all(), nt,
		func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
			r, err := redisnode.AcquireOn(ctx, c, k, req.Owner, req.TTL)
			results[i] = r
			return r.Acquired, err
		},
		func(r reply) {
			<-decided
			if failed.Load() && (r.err != nil || r.ok) {
				b.releaseNode(ctx, r.i, k, req.Owner, req.TTL, nt)
			}
		})
	t1 := gather(ctx, ch, n, b.quorum, deadline(nt))

	fail := func(err error) (driver.Grant, error) {
		decide(false)
		// Wait for the releases of the nodes that answered (they are
		// responsive); the silent ones release in the background.
		for i := range t1.answered {
			<-dones[i]
		}
		return driver.Grant{}, err
	}
	if t1.ctxErr != nil {
		return fail(t1.ctxErr)
	}
	if len(t1.yes) < b.quorum {
		return fail(b.notAcquired(req.Key, t1, results, "phase 1"))
	}

	// Nodes that said yes meanwhile join phase 2: a slow node among them
	// then costs less.
	for more := true; more; {
		select {
		case r := <-ch:
			t1.add(r)
		default:
			more = false
		}
	}

	// The token: the maximum over the acquired nodes.
	var token distlock.Token
	for _, i := range t1.yes {
		token = max(token, results[i].Token)
	}

	// Phase 2: raise the counters of the quorum to the token. Every node
	// that accepts, even after the decision, holds the lock until start +
	// TTL by its clock.
	h := &handle{keys: k, ours: make([]time.Time, n), oursSeq: make([]uint64, n)}
	valid := start.Add(req.TTL - b.drift(req.TTL))
	ch2, _ := b.fanOut(ctx, t1.yes, nt, func(ctx context.Context, _ int, c goredis.UniversalClient) (bool, error) {
		return redisnode.RaiseTokenOn(ctx, c, k, req.Owner, token)
	}, func(r reply) {
		if r.err == nil && r.ok {
			h.learn(r.i, 0, valid)
		}
	})
	t2 := gather(ctx, ch2, len(t1.yes), b.quorum, deadline(nt))
	switch {
	case t2.ctxErr != nil:
		return fail(t2.ctxErr)
	case len(t2.yes) < b.quorum && len(t2.no) > 0:
		// A lock of ours vanished between the phases (expired or deleted).
		return fail(fmt.Errorf("redlock: %q: token %d raised on %d of %d nodes (need %d), the lock was gone on %d: %w",
			req.Key, token, len(t2.yes), n, b.quorum, len(t2.no), &distlock.HeldError{Key: req.Key}))
	case len(t2.yes) < b.quorum:
		return fail(fmt.Errorf("%w: %q: token %d raised on %d of %d nodes (need %d)%s",
			ErrNoQuorum, req.Key, token, len(t2.yes), n, b.quorum, b.summary(t2)))
	}
	decide(true)
	// The portable layer's deadline is start + TTL − drift (and it gives the
	// lock back if that has passed already): every node's lock was set
	// after start, so it lasts at least that long by the nodes' clocks.
	return driver.Grant{Token: token, Start: start, Validity: req.TTL, Handle: h}, nil
}

// releaseNode gives node i's lock back after a failed attempt, even when the
// caller's context has ended; bounded by nt. The tombstone (ttl) keeps a
// late request of owner from setting the lock again.
func (b *backend) releaseNode(ctx context.Context, i int, k redisnode.Keys, owner string, ttl, nt time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nt)
	defer cancel()
	_, _ = redisnode.ReleaseOn(rctx, b.nodes[i].client, k, owner, ttl)
}

// notAcquired is the error of a failed phase 1: a HeldError when a node said
// the key is held, ErrNoQuorum otherwise.
func (b *backend) notAcquired(key string, t tally, results []redisnode.AcquireResult, phase string) error {
	n := len(b.nodes)
	if len(t.no) > 0 {
		var retry time.Duration
		for _, i := range t.no {
			if d := results[i].HolderTTL; d > 0 && (retry == 0 || d < retry) {
				retry = d
			}
		}
		return fmt.Errorf("redlock: %q: %s granted by %d of %d nodes (need %d), held on %d%s: %w",
			key, phase, len(t.yes), n, b.quorum, len(t.no), b.summary(t), &distlock.HeldError{Key: key, RetryAfter: retry})
	}
	return fmt.Errorf("%w: %q: %d of %d nodes answered, %d granted (need %d)%s",
		ErrNoQuorum, key, len(t.answered)-len(t.failed), n, len(t.yes), b.quorum, b.summary(t))
}

func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	h, ok := g.Handle.(*handle)
	if !ok {
		return 0, fmt.Errorf("%w: redlock: the grant was not made by this backend", distlock.ErrInvalidOption)
	}
	start := time.Now()
	nt := b.timeout(ttl)
	n := len(b.nodes)
	valid := start.Add(ttl - b.drift(ttl))
	nonce := newNonce()
	h.mu.Lock()
	before := slices.Clone(h.ours) // what was known before this call
	h.seq++
	seq := h.seq
	h.mu.Unlock()
	results := make([]redisnode.Extended, n) // written before the reply is sent
	// Extend where the lock is ours, take it back where it is missing: a
	// lease that holds exactly a majority would otherwise die with any one
	// node of it, contrary to the failures Redlock tolerates. Every answer,
	// even one after the decision, updates what the handle knows.
	ch, dones := b.fanOut(ctx, b.all(), nt, func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
		r, err := redisnode.ExtendOn(ctx, c, h.keys, g.Owner, ttl, g.Token, nonce)
		results[i] = r
		return r != redisnode.ExtendHeldByOther, err
	}, func(r reply) {
		switch {
		case r.err != nil:
		case r.ok:
			h.learn(r.i, seq, valid)
		default:
			h.learn(r.i, seq, time.Time{})
		}
	})
	h.mu.Lock()
	h.calls = dones
	h.mu.Unlock()
	t := gather(ctx, ch, n, b.quorum, deadline(nt))
	if t.ctxErr != nil {
		return 0, t.ctxErr
	}
	// Unbroken: nodes where the lock has been ours since before this call
	// and still is. A node that answered must have extended it; a silent
	// one counts by the expiry known for it, but only once it had its
	// chance to answer: its answer may say the lock vanished there.
	unbroken := func() (answered, silent int) {
		now := time.Now()
		for i := range n {
			_, failed := t.failed[i]
			switch {
			case !now.Before(before[i]):
			case failed || !t.answered[i]:
				silent++
			case results[i] == redisnode.ExtendRenewed:
				answered++
			}
		}
		return answered, silent
	}
	if a, sl := unbroken(); a < b.quorum && a+sl >= b.quorum && t.silent > 0 {
		t.rest(ctx, ch, n, deadline(nt))
		if t.ctxErr != nil {
			return 0, t.ctxErr
		}
	}
	if a, sl := unbroken(); a+sl < b.quorum {
		// The lock lapsed on so many nodes that a majority was free at some
		// moment: it may have had another holder since. Give back what this
		// refresh holds rather than carry on.
		for _, i := range t.yes {
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.releaseNode(ctx, i, h.keys, g.Owner, ttl, nt)
			}()
		}
		return 0, fmt.Errorf("redlock: %q: held without a break on %d of %d nodes (need %d), someone else's on %d: %w",
			g.Key, a+sl, n, b.quorum, len(t.no), distlock.ErrNotHeld)
	}
	if len(t.yes) < b.quorum {
		return 0, fmt.Errorf("%w: %q: refreshed on %d of %d nodes (need %d)%s",
			ErrNoQuorum, g.Key, len(t.yes), n, b.quorum, b.summary(t))
	}
	// Each node's new expiry was set after start.
	return ttl, nil
}

// newNonce returns a random value unique to one refresh.
func newNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// settle waits, up to the node timeout, for the node calls of h's last
// refresh, so that a repairing call cannot land after a release.
func (h *handle) settle(ctx context.Context, nt time.Duration) {
	h.mu.Lock()
	calls := h.calls
	h.calls = nil
	h.mu.Unlock()
	if len(calls) == 0 {
		return
	}
	timer := time.NewTimer(nt)
	defer timer.Stop()
	for _, done := range calls {
		select {
		case <-done:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (b *backend) Unlock(ctx context.Context, g driver.Grant) error {
	k := redisnode.KeysFor(b.prefix, g.Key)
	ttl := g.TTL
	if ttl <= 0 {
		ttl = distlock.DefaultTTL
	}
	nt := b.timeout(ttl)
	n := len(b.nodes)
	if h, ok := g.Handle.(*handle); ok {
		h.settle(ctx, nt)
	}
	// The tombstone keeps a straggling acquire or refresh of this lease
	// from setting the lock again after the release.
	ch, _ := b.fanOut(ctx, b.all(), nt, func(ctx context.Context, _ int, c goredis.UniversalClient) (bool, error) {
		return redisnode.ReleaseOn(ctx, c, k, g.Owner, ttl)
	}, nil)
	// Waits for every node (up to the node timeout), not just a quorum: a
	// TryAcquire right after Release must not find this lease's lock still
	// on a slower node.
	t := gather(ctx, ch, n, 0, deadline(nt))
	switch {
	case len(t.yes) >= b.quorum:
		return nil // freed on a majority: the rest follow or expire
	case t.ctxErr != nil:
		return t.ctxErr
	case len(t.no) > n-b.quorum:
		return fmt.Errorf("redlock: %q: not ours on %d of %d nodes: %w", g.Key, len(t.no), n, distlock.ErrNotHeld)
	}
	return fmt.Errorf("%w: %q: released on %d of %d nodes (need %d)%s",
		ErrNoQuorum, g.Key, len(t.yes), n, b.quorum, b.summary(t))
}

// Close waits for the node calls still running (each bounded by the node
// timeout), then stops the notifiers and, with WithCloseClients, closes the
// clients.
func (b *backend) Close() error {
	b.closeOnce.Do(func() {
		b.wg.Wait()
		b.closeErr = b.closeNodes()
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
