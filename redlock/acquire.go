package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/internal/clock"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

// TryLock implements driver.Backend: phase 1 asks every node for the lock
// and, if a quorum granted it, phase 2 raises their counters to the lease's
// token (see the package doc).
func (b *backend) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	a := b.newAttempt(req)
	defer a.decide(false) // any early return is a failure
	a.phase1(ctx)
	if a.t1.ctxErr != nil {
		return a.fail(a.t1.ctxErr)
	}
	if len(a.t1.yes) < b.quorum {
		return a.lost(ctx)
	}
	a.joinLateYeses()
	return a.phase2(ctx)
}

// attempt is one TryLock's state, carried from step to step. It is used
// through a pointer only: the node goroutines of phase 1 read decided and
// failed, and write results.
type attempt struct {
	b     *backend
	req   driver.Request
	start time.Time
	k     redisnode.Keys
	nt    time.Duration
	n     int

	results []redisnode.AcquireResult // phase 1, per node: written before the reply is sent
	decided chan struct{}             // closed once the attempt won or failed
	failed  atomic.Bool               // set before decided is closed
	once    sync.Once

	ch    <-chan reply          // phase 1's replies, read by gather and joinLateYeses
	dones map[int]chan struct{} // per node: closed once its call and give-back are done
	sub   *subscription         // the waiting Acquire's subscription, nil for none
	t1    tally                 // phase 1's answers
	mute  []int                 // the nodes whose notices the waiter ignores after a failure
}

// newAttempt starts the clock of an attempt at req: the lease's validity
// is counted from here.
func (b *backend) newAttempt(req driver.Request) *attempt {
	start := time.Now()
	n := len(b.nodes)
	return &attempt{
		b:       b,
		req:     req,
		start:   start,
		k:       redisnode.KeysFor(b.prefix, req.Key),
		nt:      b.timeout(req.TTL),
		n:       n,
		results: make([]redisnode.AcquireResult, n),
		decided: make(chan struct{}),
	}
}

// decide settles the attempt once: each node's goroutine of phase 1 waits
// for it to know whether to give its node back.
func (a *attempt) decide(ok bool) {
	a.once.Do(func() {
		a.failed.Store(!ok)
		close(a.decided)
	})
}

// phase1 sends the acquire to every node and gathers the answers until a
// quorum said yes or can no longer say it. Each node's goroutine waits for
// the decision and, if the attempt failed, releases its node unless the
// node said "held" (so nothing of ours is there).
func (a *attempt) phase1(ctx context.Context) {
	b, req, k, nt, results := a.b, a.req, a.k, a.nt, a.results
	// No value here: the holder record carries the lease's token, known
	// only after this phase; phase 2 writes it.
	acquire := redisnode.AcquireCall(k, req.Owner, req.TTL, "")
	a.ch, a.dones = b.fanOutTracked(ctx, b.all(), nt,
		func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
			r, err := acquire.Acquire(ctx, c)
			results[i] = r
			return r.Acquired, err
		},
		func(r reply) {
			<-a.decided
			if a.failed.Load() && (r.err != nil || r.ok) {
				b.releaseNode(ctx, r.i, k, req.Owner, req.TTL, nt)
			}
		})
	a.sub = b.waitingFor(req)
	if a.sub != nil {
		// Until this attempt fails, every node's notice wakes the waiter: a
		// node the last attempt took may be another's now.
		a.sub.mute(nil)
	}
	var suspects map[int]bool
	if req.Waiter != "" {
		// Only a waiting Acquire skips suspects: it tries again anyway,
		// while a TryAcquire's "held" could send its caller away for a
		// minority lock's whole TTL when the suspect had recovered.
		suspects = b.suspects()
	}
	a.t1 = gatherHopeful(ctx, a.ch, a.n, b.quorum, deadline(nt), suspects)
}

// fail ends the attempt without the lock: it tells the waiter's
// subscription which nodes to mute (before the give-backs, whose notices
// it is about), lets the node goroutines give their nodes back, and
// returns err.
//
// It waits for the releases of the nodes that answered, even those whose
// call failed (bounded by the node timeout); the silent ones release in
// the background. Returning sooner lets a TryAcquire loop hold the free
// node of a lease held on a bare majority most of the time, and the
// lease's repair of it fails until the lease is lost
// (TestHeldLeaseSurvivesOneNodeOfItsMajority).
func (a *attempt) fail(err error) (driver.Grant, error) {
	if a.sub != nil {
		a.sub.mute(a.mute)
	}
	a.decide(false)
	for i := range a.t1.answered {
		<-a.dones[i]
	}
	return driver.Grant{}, err
}

// lost is the verdict of a phase 1 without a quorum of yeses: it mutes the
// waiter's own give-backs when only "held" answers decided, fails the
// attempt, and, for a waiting Acquire whose split vote a node that did
// not answer decided, pauses before the next attempt.
//
// The unheard nodes are those that failed, stayed silent, or were not
// waited for (a suspect): only when they could have made the quorum was
// the vote decided by them. (Nodes merely left unread once a quorum was
// out of reach cannot make it: gather stops only then.)
func (a *attempt) lost(ctx context.Context) (driver.Grant, error) {
	b := a.b
	unheard := len(a.t1.failed) + a.n - len(a.t1.answered)
	if len(a.t1.no) > 0 && len(a.t1.yes)+unheard < b.quorum {
		a.mute = a.ownGiveBacks()
	}
	g, err := a.fail(b.notAcquired(a.req.Key, a.t1, a.results, "phase 1"))
	if a.req.Waiter == "" {
		return g, err // TryAcquire: the caller decides what comes next
	}
	if len(a.t1.yes) > 0 && len(a.t1.no) > 0 && len(a.t1.yes)+unheard >= b.quorum {
		a.splitPause(ctx)
	}
	return g, err
}

// ownGiveBacks lists the nodes to mute after a loss to "held" alone: the
// nodes it took, and those left unread (a late yes gives back too). Until
// a node that said "held" changes, no attempt can win, and a release there
// still wakes the waiter (an expiry or a deletion: the paced retry, see
// mutedPoll), so the notices of these nodes are only the attempt's own
// give-backs. lost does not mute when an unheard node could have decided:
// such a node can become free without a notice (a node out of memory
// recovers; a hung one resumes and its lock expires), and a muted waiter
// would sleep through that for seconds; the split pause paces those
// attempts instead. See subscription.mute.
func (a *attempt) ownGiveBacks() []int {
	mute := slices.Clone(a.t1.yes)
	for i := range a.n {
		if !a.t1.answered[i] && !a.t1.suspect[i] {
			mute = append(mute, i)
		}
	}
	return mute
}

// splitPause sets apart the contenders of a split vote that a node which
// did not answer decided: woken together by each other's give-backs (and
// a lone waiter by its own), they would try again at once and split the
// same way. The pause is random, up to two node timeouts, and ends no
// later than the lock that blocked the attempt. Its range does not grow
// with each split in a row: a wider one keeps a lone waiter asleep
// through a real release.
func (a *attempt) splitPause(ctx context.Context) {
	pause := rand.N(2 * a.nt)
	if held := shortestHeld(a.t1, a.results); held > 0 {
		pause = min(pause, held)
	}
	_ = clock.Sleep(ctx, pause)
}

// joinLateYeses adds the phase-1 replies already in: nodes that said yes
// meanwhile join phase 2, so a slow node among them then costs less.
func (a *attempt) joinLateYeses() {
	for more := true; more; {
		select {
		case r := <-a.ch:
			a.t1.add(r)
		default:
			more = false
		}
	}
}

// phase2 raises the counters of the nodes that said yes to the token (the
// maximum over them), and writes the holder record (owner, token, value)
// that Inspect reads. Every node that accepts, even after the decision,
// holds the lock until start + TTL by its clock.
func (a *attempt) phase2(ctx context.Context) (driver.Grant, error) {
	b, req, k, nt := a.b, a.req, a.k, a.nt
	var token distlock.Token
	for _, i := range a.t1.yes {
		token = max(token, a.results[i].Token)
	}
	h := &handle{keys: k, value: req.Value, ours: make([]time.Time, a.n), oursSeq: make([]uint64, a.n)}
	valid := a.start.Add(req.TTL - req.Drift.For(req.TTL))
	// Learned inside the call, before its reply is counted: the grant
	// must not go out knowing less than the answers that decided it.
	raise := redisnode.RaiseTokenCall(k, req.Owner, token, req.TTL, req.Value)
	ch2 := b.fanOut(ctx, a.t1.yes, nt, func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
		ok, err := raise.RaiseToken(ctx, c)
		if err == nil && ok {
			h.learn(i, 0, valid)
		}
		return ok, err
	})
	t2 := gather(ctx, ch2, len(a.t1.yes), b.quorum, deadline(nt))
	if err := a.raiseVerdict(token, t2); err != nil {
		return a.fail(err)
	}
	a.decide(true)
	// The portable layer's deadline is start + TTL − drift (and it gives the
	// lock back if that has passed already): every node's lock was set
	// after start, so it lasts at least that long by the nodes' clocks.
	return driver.Grant{Token: int64(token), Start: a.start, Validity: req.TTL, Handle: h}, nil
}

// raiseVerdict is the error of a phase 2 that did not raise the token on
// a quorum, nil when it did.
func (a *attempt) raiseVerdict(token distlock.Token, t2 tally) error {
	b, key, n := a.b, a.req.Key, a.n
	switch {
	case t2.ctxErr != nil:
		return t2.ctxErr
	case len(t2.yes) < b.quorum && len(t2.no) > 0:
		// A lock of ours vanished between the phases (expired or deleted).
		return fmt.Errorf("redlock: %q: token %d raised on %d of %d nodes (need %d), the lock was gone on %d: %w",
			key, token, len(t2.yes), n, b.quorum, len(t2.no), &distlock.HeldError{Key: key})
	case len(t2.yes) < b.quorum:
		if err := b.refused(fmt.Sprintf("%q: raising the token", key), t2); err != nil {
			return err
		}
		return fmt.Errorf("%w: %q: token %d raised on %d of %d nodes (need %d)%s",
			ErrNoQuorum, key, token, len(t2.yes), n, b.quorum, b.summary(t2))
	}
	return nil
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
		held := &distlock.HeldError{Key: key, RetryAfter: shortestHeld(t, results)}
		if len(t.failed) == 0 && len(t.no) > n-b.quorum {
			// Contention alone decided: another owner holds the key.
			return fmt.Errorf("redlock: %q: held by another owner on %d of %d nodes: %w", key, len(t.no), n, held)
		}
		return fmt.Errorf("redlock: %q: %s granted by %d of %d nodes (need %d), held by another owner on %d%s: %w",
			key, phase, len(t.yes), n, b.quorum, len(t.no), b.summary(t), held)
	}
	if err := b.refused(fmt.Sprintf("%q: %s", key, phase), t); err != nil {
		return err
	}
	return fmt.Errorf("%w: %q: %d of %d nodes answered, %d granted (need %d)%s",
		ErrNoQuorum, key, len(t.answered)-len(t.failed), n, len(t.yes), b.quorum, b.summary(t))
}
