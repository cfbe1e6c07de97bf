package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

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
	// No value here: the holder record carries the lease's token, known
	// only after this phase; phase 2 writes it.
	acquire := redisnode.AcquireCall(k, req.Owner, req.TTL, "")
	ch, dones := b.fanOutTracked(ctx, b.all(), nt,
		func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
			r, err := acquire.Acquire(ctx, c)
			results[i] = r
			return r.Acquired, err
		},
		func(r reply) {
			<-decided
			if failed.Load() && (r.err != nil || r.ok) {
				b.releaseNode(ctx, r.i, k, req.Owner, req.TTL, nt)
			}
		})
	sub := b.waitingFor(req)
	if sub != nil {
		// Until this attempt fails, every node's notice wakes the waiter: a
		// node the last attempt took may be another's now.
		sub.mute(nil)
	}
	var suspects map[int]bool
	if req.Waiter != "" {
		// Only a waiting Acquire skips suspects: it tries again anyway,
		// while a TryAcquire's "held" could send its caller away for a
		// minority lock's whole TTL when the suspect had recovered.
		suspects = b.suspects()
	}
	t1 := gatherHopeful(ctx, ch, n, b.quorum, deadline(nt), suspects)

	var mute []int // the nodes whose notices the waiter ignores after a failure
	fail := func(err error) (driver.Grant, error) {
		if sub != nil {
			sub.mute(mute) // before the give-backs, whose notices it is about
		}
		decide(false)
		// Wait for the releases of the nodes that answered, even those
		// whose call failed (bounded by the node timeout); the silent ones
		// release in the background. Returning sooner let a TryAcquire
		// loop hold the free node of a lease held on a bare majority
		// most of the time, and the lease's repair of it failed until the
		// lease was lost (TestHeldLeaseSurvivesOneNodeOfItsMajority).
		for i := range t1.answered {
			<-dones[i]
		}
		return driver.Grant{}, err
	}
	if t1.ctxErr != nil {
		return fail(t1.ctxErr)
	}
	if len(t1.yes) < b.quorum {
		// Nodes that failed, stayed silent, or were not waited for (a
		// suspect): only when they could have made the quorum was the
		// vote decided by them. (Nodes merely left unread once a quorum
		// was out of reach cannot make it: gather stops only then.)
		unheard := len(t1.failed) + n - len(t1.answered)
		if len(t1.no) > 0 && len(t1.yes)+unheard < b.quorum {
			// Lost to "held" alone: until one of those nodes changes,
			// no attempt can win, and a release there still wakes us (an
			// expiry or a deletion: the paced retry, see mutedPoll). So
			// the nodes we took, and those left unread (a late yes gives
			// back too), are muted: their notices are our own
			// give-backs. Not when an unheard node could have decided:
			// it can become free without a notice (a node out of memory
			// recovers; a hung one resumes and its lock expires), and two
			// reviews saw waiters sleep 4-9 s through that; the split
			// pause below paces those attempts. See subscription.mute.
			mute = slices.Clone(t1.yes)
			for i := range n {
				if !t1.answered[i] && !t1.suspect[i] {
					mute = append(mute, i)
				}
			}
		}
		g, err := fail(b.notAcquired(req.Key, t1, results, "phase 1"))
		if req.Waiter == "" {
			return g, err // TryAcquire: the caller decides what comes next
		}
		if len(t1.yes) > 0 && len(t1.no) > 0 && len(t1.yes)+unheard >= b.quorum {
			// A split vote decided by a node that did not answer: the
			// contenders, woken together by each other's give-backs (and
			// a lone waiter by its own), would try again at once, and
			// split the same way. A random pause of up to two node
			// timeouts sets them apart; it ends no later than the lock
			// that blocked us. (A range growing with each split in a row
			// kept a lone waiter asleep through a real release: a review.)
			pause := rand.N(2 * nt)
			if held := shortestHeld(t1, results); held > 0 {
				pause = min(pause, held)
			}
			_ = driver.Sleep(ctx, pause)
		}
		return g, err
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

	// Phase 2: raise the counters of the quorum to the token, and write the
	// holder record (owner, token, value) that Inspect reads. Every node
	// that accepts, even after the decision, holds the lock until start +
	// TTL by its clock.
	h := &handle{keys: k, value: req.Value, ours: make([]time.Time, n), oursSeq: make([]uint64, n)}
	valid := start.Add(req.TTL - req.Drift.For(req.TTL))
	// Learned inside the call, before its reply is counted: the grant
	// must not go out knowing less than the answers that decided it.
	raise := redisnode.RaiseTokenCall(k, req.Owner, token, req.TTL, req.Value)
	ch2 := b.fanOut(ctx, t1.yes, nt, func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
		ok, err := raise.RaiseToken(ctx, c)
		if err == nil && ok {
			h.learn(i, 0, valid)
		}
		return ok, err
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
		if err := b.refused(fmt.Sprintf("%q: raising the token", req.Key), t2); err != nil {
			return fail(err)
		}
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
// caller's context has ended; bounded by nt. The tombstone keeps a late
// request of owner (one whose call timed out may still be on its way) from
// setting the lock again.
func (b *backend) releaseNode(ctx context.Context, i int, k redisnode.Keys, owner string, ttl, nt time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nt)
	defer cancel()
	_, _ = redisnode.ReleaseOn(rctx, b.nodes[i].client, k, owner, redisnode.GiveBackTombstone(ttl), true)
}

// shortestHeld is the least time left on the locks that the nodes saying
// "held" in t reported, 0 when none said how long.
func shortestHeld(t tally, results []redisnode.AcquireResult) time.Duration {
	least := time.Duration(0)
	for _, i := range t.no {
		if d := results[i].HolderTTL; d > 0 && (least == 0 || d < least) {
			least = d
		}
	}
	return least
}

// notAcquired is the error of a failed phase 1: a HeldError when a node said
// the key is held, ErrNoQuorum otherwise.
func (b *backend) notAcquired(key string, t tally, results []redisnode.AcquireResult, phase string) error {
	n := len(b.nodes)
	if len(t.no) > 0 {
		retry := shortestHeld(t, results)
		return fmt.Errorf("redlock: %q: %s granted by %d of %d nodes (need %d), held on %d%s: %w",
			key, phase, len(t.yes), n, b.quorum, len(t.no), b.summary(t), &distlock.HeldError{Key: key, RetryAfter: retry})
	}
	if err := b.refused(fmt.Sprintf("%q: %s", key, phase), t); err != nil {
		return err
	}
	return fmt.Errorf("%w: %q: %d of %d nodes answered, %d granted (need %d)%s",
		ErrNoQuorum, key, len(t.answered)-len(t.failed), n, len(t.yes), b.quorum, b.summary(t))
}
