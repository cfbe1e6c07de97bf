package conformance

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
)

// long is a TTL no case waits out: a key held with it is freed only by a
// release, a crash or a forced expiry.
const long = 30 * time.Second

var cases = []Case{
	{"MutualExclusion", "at most one holder of a key at any time, under contention from several Lockers, and each holder's token is larger than the previous holder's", mutualExclusion},
	{"TryAcquireFree", "TryAcquire on a free key returns a lease with the key, a positive token, an open Done and a future Expires", tryAcquireFree},
	{"TryAcquireHeld", "TryAcquire on a held key fails at once with ErrNotAcquired, from another Locker and from the holder's own (locks are not reentrant)", tryAcquireHeld},
	{"ReleaseFreesKey", "after Release, Done is closed, Err is ErrReleased, and another Locker can take the key at once", releaseFreesKey},
	{"ReleaseTwice", "a second Release of the same lease returns ErrNotHeld", releaseTwice},
	{"RefreshAfterRelease", "Refresh of a released lease returns ErrNotHeld", refreshAfterRelease},
	{"StaleReleaseKeepsNewHolder", "a release by a holder whose lock ended on the server returns ErrNotHeld and leaves the new holder's lock in place", staleRelease},
	{"StaleRefreshFails", "a refresh by a holder whose lock ended on the server returns ErrNotHeld and does not take the lock back", staleRefresh},
	{"RefreshExtends", "Refresh moves Expires forward and keeps the key held past the original TTL", refreshExtends},
	{"RefreshInvalidTTL", "Refresh with a zero or negative TTL returns ErrInvalidTTL and leaves the lease held", refreshInvalidTTL},
	{"ExpiresIsConservative", "Expires is after the acquire began and before its end plus the TTL (drift is subtracted, never added)", expiresConservative},
	{"ExpiryEndsLease", "a lease that is not refreshed ends within its TTL with ErrLeaseLost, and the key can then be taken", expiryEndsLease},
	{"AutoRenewOutlivesTTL", "a lease with WithAutoRenew stays held, with the same token, long past its TTL", autoRenew},
	{"CrashFreesAfterTTL", "a crashed holder's lock stays held (the server does not free it early) and is free again after the TTL", crashFreesAfterTTL},
	{"TokensIncreaseAfterCrash", "the holder after a crashed one gets a larger token", tokensAfterCrash},
	{"ForcedExpiryEndsDone", "when the server drops a renewing lease's lock, Done closes within the TTL plus a renewal and Err matches ErrLeaseLost", forcedExpiry},
	{"TokensIncrease", "successive holders of a key, across Lockers, get strictly increasing tokens", tokensIncrease},
	{"TokensIncreaseAfterExpiry", "the holder after a lock ended on the server gets a larger token", tokensAfterExpiry},
	{"WaiterWakesOnRelease", "a waiting Acquire takes the key soon after the holder releases, long before the holder's TTL", waiterWakes},
	{"CancelWaitReturnsBoth", "an Acquire cut short by its context returns promptly an error matching both ErrNotAcquired and ctx.Err()", cancelWait},
	{"CancelLeavesNoResidue", "a cancelled waiter leaves nothing behind: once the holder releases, the key can be taken at once", cancelNoResidue},
	{"KeyIsolation", "holding one key neither blocks nor releases another", keyIsolation},
	{"InvalidKey", "empty, oversized, non-UTF-8 and control-character keys give ErrInvalidKey (and ErrInvalid), never a panic or a hang", invalidKey},
	{"InvalidTTL", "zero, negative and over-long TTLs give ErrInvalidTTL (and ErrInvalid)", invalidTTL},
	{"DoNilFunc", "Do with a nil function returns ErrInvalid without taking the lock", doNilFunc},
	{"DoRunsAndReleases", "Do runs fn while holding the key, returns fn's error, and releases afterwards", doRunsAndReleases},
	{"DoRenews", "Do keeps the lease renewed while fn runs longer than the TTL", doRenews},
	{"DoCancelsOnLoss", "when the lease is lost during Do, fn's context is cancelled and Do returns ErrLeaseLost", doCancelsOnLoss},
	{"DoReleasesOnPanic", "a panic in fn still releases the lock, and the panic reaches Do's caller", doReleasesOnPanic},
	{"CloseEndsLeases", "Close releases held locks, closes their Done with ErrClosed, makes later calls return ErrClosed, and is idempotent", closeEndsLeases},
	{"CloseWakesWaiters", "Close wakes a waiting Acquire, which returns ErrClosed", closeWakesWaiters},
	{"Guarantees", "Guarantees names the backend and a valid wait mode", guarantees},
}

func mutualExclusion(e *env) {
	key := e.key("k")
	lockers := []distlock.Locker{e.locker(), e.locker(), e.locker()}
	var (
		inside    atomic.Int32
		mu        sync.Mutex // guards last
		last      distlock.Token
		vmu       sync.Mutex // guards violation
		violation error
		wg        sync.WaitGroup
	)
	report := func(err error) {
		vmu.Lock()
		if violation == nil {
			violation = err
		}
		vmu.Unlock()
	}
	for g := 0; g < e.h.Contenders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[g%len(lockers)]
			for i := 0; i < e.h.Rounds; i++ {
				ctx, cancel := e.timeout(e.patience() * 4)
				ls, err := l.Acquire(ctx, key, distlock.WithTTL(long))
				cancel()
				if err != nil {
					report(errors.New("Acquire under contention: " + err.Error()))
					return
				}
				if n := inside.Add(1); n > 1 {
					report(errors.New("two holders inside the critical section at once"))
				}
				mu.Lock()
				prev := last
				last = ls.Token()
				mu.Unlock()
				if ls.Token() <= prev {
					report(errors.New("token " + ls.Token().String() + " not above the previous holder's " + prev.String()))
				}
				time.Sleep(200 * time.Microsecond)
				inside.Add(-1)
				rctx, rcancel := e.timeout(e.patience())
				err = ls.Release(rctx)
				rcancel()
				if err != nil {
					report(errors.New("Release under contention: " + err.Error()))
					return
				}
			}
		}()
	}
	wg.Wait()
	if violation != nil {
		e.fail("%v", violation)
	}
}

func tryAcquireFree(e *env) {
	l := e.locker()
	before := time.Now()
	ls := e.tryAcquire(l, e.key("k"), distlock.WithTTL(long))
	switch {
	case ls.Key() != e.key("k"):
		e.fail("Key() = %q, want %q", ls.Key(), e.key("k"))
	case ls.Token() <= 0:
		e.fail("Token() = %d, want > 0", ls.Token())
	case ls.Err() != nil:
		e.fail("Err() = %v on a fresh lease", ls.Err())
	case !ls.Expires().After(before):
		e.fail("Expires() %v is not in the future", ls.Expires())
	}
	select {
	case <-ls.Done():
		e.fail("Done() closed on a fresh lease")
	default:
	}
	e.release(ls)
}

func tryAcquireHeld(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	e.mustBeHeld(b, key, "another Locker")
	e.mustBeHeld(a, key, "the holder's own Locker")
	if ls.Err() != nil {
		e.fail("the holder's lease ended after failed attempts by others: %v", ls.Err())
	}
	e.release(ls)
}

func releaseFreesKey(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	e.release(ls)
	e.waitDone(ls, time.Second, distlock.ErrReleased, "after Release")
	e.release(e.tryAcquire(b, key, distlock.WithTTL(long)))
}

func releaseTwice(e *env) {
	ls := e.tryAcquire(e.locker(), e.key("k"), distlock.WithTTL(long))
	e.release(ls)
	if err := ls.Release(e.ctx); !errors.Is(err, distlock.ErrNotHeld) {
		e.fail("second Release: want ErrNotHeld, got %v", err)
	}
}

func refreshAfterRelease(e *env) {
	ls := e.tryAcquire(e.locker(), e.key("k"), distlock.WithTTL(long))
	e.release(ls)
	if err := ls.Refresh(e.ctx); !errors.Is(err, distlock.ErrNotHeld) {
		e.fail("Refresh after Release: want ErrNotHeld, got %v", err)
	}
}

// staleHolder returns a lease whose lock has ended on the server and the new
// holder's lease on the same key.
func (e *env) staleHolder() (stale, fresh *distlock.Lease, c distlock.Locker) {
	a, b := e.locker(), e.locker()
	c = e.locker()
	key := e.key("k")
	stale = e.tryAcquire(a, key, distlock.WithTTL(long))
	e.endOnServer(key)
	fresh = e.acquire(b, key, distlock.WithTTL(long))
	return stale, fresh, c
}

func staleRelease(e *env) {
	stale, fresh, c := e.staleHolder()
	if err := stale.Release(e.ctx); !errors.Is(err, distlock.ErrNotHeld) {
		e.fail("Release by the stale holder: want ErrNotHeld, got %v", err)
	}
	e.mustBeHeld(c, fresh.Key(), "after the stale holder's Release")
	if fresh.Err() != nil {
		e.fail("the new holder's lease ended after the stale Release: %v", fresh.Err())
	}
	e.release(fresh)
}

func staleRefresh(e *env) {
	stale, fresh, c := e.staleHolder()
	if err := stale.Refresh(e.ctx); !errors.Is(err, distlock.ErrNotHeld) {
		e.fail("Refresh by the stale holder: want ErrNotHeld, got %v", err)
	}
	e.mustBeHeld(c, fresh.Key(), "after the stale holder's Refresh")
	e.release(fresh)
	// The stale refresh must not have revived the old lock either.
	e.release(e.tryAcquire(c, fresh.Key(), distlock.WithTTL(long)))
}

func refreshExtends(e *env) {
	a, b := e.locker(), e.locker()
	ttl := e.h.TTL
	ls := e.tryAcquire(a, e.key("k"), distlock.WithTTL(ttl))
	first := ls.Expires()
	time.Sleep(ttl / 3)
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	if err := ls.Refresh(ctx, distlock.WithTTL(3*ttl)); err != nil {
		e.fail("Refresh: %v", err)
	}
	if !ls.Expires().After(first) {
		e.fail("Expires did not move forward: %v then %v", first, ls.Expires())
	}
	if ls.TTL() != 3*ttl {
		e.fail("TTL() = %v after Refresh(WithTTL(%v))", ls.TTL(), 3*ttl)
	}
	time.Sleep(ttl + ttl/3) // past the first TTL, before the new one
	if ls.Err() != nil {
		e.fail("lease ended before its refreshed TTL: %v", ls.Err())
	}
	e.mustBeHeld(b, ls.Key(), "past the original TTL after a refresh")
	e.release(ls)
}

func refreshInvalidTTL(e *env) {
	ls := e.tryAcquire(e.locker(), e.key("k"), distlock.WithTTL(long))
	for _, ttl := range []time.Duration{0, -time.Second} {
		if err := ls.Refresh(e.ctx, distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			e.fail("Refresh(WithTTL(%v)): want ErrInvalidTTL, got %v", ttl, err)
		}
	}
	if ls.Err() != nil {
		e.fail("an invalid Refresh ended the lease: %v", ls.Err())
	}
	e.release(ls)
}

func expiresConservative(e *env) {
	l := e.locker()
	before := time.Now()
	ls := e.tryAcquire(l, e.key("k"), distlock.WithTTL(long))
	after := time.Now()
	if exp := ls.Expires(); !exp.After(before) || !exp.Before(after.Add(long)) {
		e.fail("Expires() = %v, want within (%v, %v)", exp, before, after.Add(long))
	}
	e.release(ls)
}

func expiryEndsLease(e *env) {
	a, b := e.locker(), e.locker()
	if e.sessionTTL(a) {
		e.skip("session-bound backend: locks end with the session, not a TTL")
	}
	ls := e.tryAcquire(a, e.key("k"), distlock.WithTTL(e.h.TTL))
	e.waitDone(ls, e.patience(), distlock.ErrLeaseLost, "lease left unrefreshed past its TTL")
	e.release(e.acquire(b, ls.Key(), distlock.WithTTL(long)))
}

func autoRenew(e *env) {
	a, b := e.locker(), e.locker()
	ttl := e.h.TTL
	ls := e.tryAcquire(a, e.key("k"), distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	tok := ls.Token()
	time.Sleep(3 * ttl)
	if ls.Err() != nil {
		e.fail("a renewing lease ended: %v", ls.Err())
	}
	e.mustBeHeld(b, ls.Key(), "three TTLs into a renewing lease")
	if ls.Token() != tok {
		e.fail("token changed from %d to %d while renewing", tok, ls.Token())
	}
	e.release(ls)
}

func crashFreesAfterTTL(e *env) {
	e.needCrash()
	a, b := e.locker(), e.locker()
	key := e.key("k")
	e.tryAcquire(a, key, distlock.WithTTL(e.h.TTL), distlock.WithAutoRenew(true))
	e.crash(a)
	e.mustBeHeld(b, key, "right after the holder crashed")
	e.release(e.acquire(b, key, distlock.WithTTL(long)))
}

func tokensAfterCrash(e *env) {
	e.needCrash()
	a, b := e.locker(), e.locker()
	key := e.key("k")
	first := e.tryAcquire(a, key, distlock.WithTTL(e.h.TTL), distlock.WithAutoRenew(true))
	e.crash(a)
	next := e.acquire(b, key, distlock.WithTTL(long))
	if next.Token() <= first.Token() {
		e.fail("token after a crash %d is not above the crashed holder's %d", next.Token(), first.Token())
	}
	e.release(next)
}

func forcedExpiry(e *env) {
	if e.h.ForceExpire == nil {
		e.skip("harness has no ForceExpire")
	}
	ttl := e.h.TTL
	ls := e.tryAcquire(e.locker(), e.key("k"), distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	e.endOnServer(ls.Key())
	e.waitDone(ls, ttl+ttl/3+5*time.Second, distlock.ErrLeaseLost, "after the server dropped the lock")
}

func tokensIncrease(e *env) {
	lockers := []distlock.Locker{e.locker(), e.locker()}
	key := e.key("k")
	var last distlock.Token
	for i := 0; i < 6; i++ {
		ls := e.acquire(lockers[i%2], key, distlock.WithTTL(long))
		if ls.Token() <= last {
			e.fail("holder %d got token %d, not above the previous %d", i, ls.Token(), last)
		}
		last = ls.Token()
		e.release(ls)
	}
}

func tokensAfterExpiry(e *env) {
	stale, fresh, _ := e.staleHolder()
	if fresh.Token() <= stale.Token() {
		e.fail("token after the server dropped the lock %d is not above the previous %d", fresh.Token(), stale.Token())
	}
	e.release(fresh)
}

func waiterWakes(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	got := make(chan *distlock.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := e.timeout(long)
		defer cancel()
		w, err := b.Acquire(ctx, key, distlock.WithTTL(long))
		if err != nil {
			errc <- err
			return
		}
		got <- w
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter start waiting
	e.release(ls)
	select {
	case w := <-got:
		e.release(w)
	case err := <-errc:
		e.fail("waiting Acquire: %v", err)
	case <-time.After(long / 3):
		e.fail("waiter not woken within %v of the release (TTL %v)", long/3, long)
	}
}

func cancelWait(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Acquire(ctx, key, distlock.WithTTL(long))
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		e.fail("Acquire past its deadline: want ErrNotAcquired and DeadlineExceeded, got %v", err)
	}
	// Promptly: the waiter must notice its context, not wait for the
	// holder (whose TTL is 30s) or a long poll.
	if d := time.Since(start); d > 3*time.Second {
		e.fail("Acquire with a 200ms deadline returned after %v", d)
	}
	cctx, ccancel := context.WithCancel(e.ctx)
	time.AfterFunc(100*time.Millisecond, ccancel)
	if _, err := b.Acquire(cctx, key, distlock.WithTTL(long)); !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		e.fail("Acquire cancelled: want ErrNotAcquired and Canceled, got %v", err)
	}
	e.release(ls)
}

func cancelNoResidue(e *env) {
	a, b, c := e.locker(), e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(e.ctx, 150*time.Millisecond)
			defer cancel()
			_, _ = b.Acquire(ctx, key, distlock.WithTTL(long))
		}()
	}
	wg.Wait()
	e.release(ls)
	e.release(e.tryAcquire(c, key, distlock.WithTTL(long)))
}

func keyIsolation(e *env) {
	a, b := e.locker(), e.locker()
	k1, k2 := e.key("one"), e.key("two")
	l1 := e.tryAcquire(a, k1, distlock.WithTTL(long))
	l2 := e.tryAcquire(b, k2, distlock.WithTTL(long))
	e.release(l1)
	e.mustBeHeld(a, k2, "after releasing another key")
	if l2.Err() != nil {
		e.fail("releasing %q ended the lease on %q: %v", k1, k2, l2.Err())
	}
	e.release(l2)
}

func invalidKey(e *env) {
	l := e.locker()
	ctx, cancel := e.timeout(5 * time.Second)
	defer cancel()
	bad := map[string]string{
		"empty":     "",
		"oversized": strings.Repeat("k", distlock.MaxKeyLen+1),
		"non-UTF-8": "bad\xff",
		"NUL":       "a\x00b",
		"newline":   "a\nb",
	}
	for what, key := range bad {
		if _, err := l.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrInvalidKey) || !errors.Is(err, distlock.ErrInvalid) {
			e.fail("TryAcquire with a %s key: want ErrInvalidKey, got %v", what, err)
		}
		if _, err := l.Acquire(ctx, key); !errors.Is(err, distlock.ErrInvalidKey) {
			e.fail("Acquire with a %s key: want ErrInvalidKey, got %v", what, err)
		}
		if err := l.Do(ctx, key, func(context.Context, *distlock.Lease) error { return nil }); !errors.Is(err, distlock.ErrInvalidKey) {
			e.fail("Do with a %s key: want ErrInvalidKey, got %v", what, err)
		}
	}
}

func invalidTTL(e *env) {
	l := e.locker()
	ctx, cancel := e.timeout(5 * time.Second)
	defer cancel()
	for _, ttl := range []time.Duration{0, -time.Second, distlock.MaxTTL + time.Hour} {
		if _, err := l.TryAcquire(ctx, e.key("k"), distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) || !errors.Is(err, distlock.ErrInvalid) {
			e.fail("TryAcquire with TTL %v: want ErrInvalidTTL, got %v", ttl, err)
		}
		if _, err := l.Acquire(ctx, e.key("k"), distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			e.fail("Acquire with TTL %v: want ErrInvalidTTL, got %v", ttl, err)
		}
	}
}

func doNilFunc(e *env) {
	l := e.locker()
	if err := l.Do(e.ctx, e.key("k"), nil); !errors.Is(err, distlock.ErrInvalid) {
		e.fail("Do(nil): want ErrInvalid, got %v", err)
	}
	e.release(e.tryAcquire(l, e.key("k"), distlock.WithTTL(long)))
}

var errFromFn = errors.New("conformance: fn's own error")

func doRunsAndReleases(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ran := false
	err := a.Do(e.ctx, key, func(ctx context.Context, ls *distlock.Lease) error {
		ran = true
		if ls == nil || ls.Key() != key {
			e.fail("Do passed the wrong lease")
		}
		if ctx.Err() != nil {
			e.fail("fn's context already done: %v", ctx.Err())
		}
		e.mustBeHeld(b, key, "inside Do")
		return errFromFn
	}, distlock.WithTTL(long))
	if !ran {
		e.fail("Do did not run fn")
	}
	if !errors.Is(err, errFromFn) {
		e.fail("Do returned %v, want fn's error", err)
	}
	e.release(e.tryAcquire(b, key, distlock.WithTTL(long)))
}

func doRenews(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ttl := e.h.TTL
	err := a.Do(e.ctx, key, func(ctx context.Context, ls *distlock.Lease) error {
		select {
		case <-time.After(3 * ttl):
		case <-ctx.Done():
			e.fail("fn's context ended while the lease should be renewed: %v", context.Cause(ctx))
		}
		if ls.Err() != nil {
			e.fail("lease ended inside Do: %v", ls.Err())
		}
		e.mustBeHeld(b, key, "three TTLs into Do")
		return nil
	}, distlock.WithTTL(ttl))
	if err != nil {
		e.fail("Do: %v", err)
	}
}

func doCancelsOnLoss(e *env) {
	if e.h.ForceExpire == nil {
		e.skip("harness has no ForceExpire")
	}
	l := e.locker()
	key := e.key("k")
	ttl := e.h.TTL
	err := l.Do(e.ctx, key, func(ctx context.Context, ls *distlock.Lease) error {
		e.endOnServer(key)
		select {
		case <-ctx.Done():
		case <-time.After(ttl + ttl/3 + 5*time.Second):
			e.fail("fn's context not cancelled after the lock was lost")
		}
		if !errors.Is(context.Cause(ctx), distlock.ErrLeaseLost) {
			e.fail("fn's context cause = %v, want ErrLeaseLost", context.Cause(ctx))
		}
		return nil
	}, distlock.WithTTL(ttl))
	if !errors.Is(err, distlock.ErrLeaseLost) {
		e.fail("Do after losing the lease returned %v, want ErrLeaseLost", err)
	}
}

func doReleasesOnPanic(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	recovered := func() (r any) {
		defer func() { r = recover() }()
		_ = a.Do(e.ctx, key, func(context.Context, *distlock.Lease) error { panic("boom") }, distlock.WithTTL(long))
		return nil
	}()
	if recovered != "boom" {
		e.fail("the panic in fn did not reach the caller (got %v)", recovered)
	}
	e.release(e.tryAcquire(b, key, distlock.WithTTL(long)))
}

func closeEndsLeases(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	if err := a.Close(); err != nil {
		e.fail("Close: %v", err)
	}
	e.waitDone(ls, time.Second, distlock.ErrClosed, "after Close")
	e.release(e.tryAcquire(b, key, distlock.WithTTL(long)))
	if _, err := a.TryAcquire(e.ctx, e.key("other")); !errors.Is(err, distlock.ErrClosed) {
		e.fail("TryAcquire after Close: want ErrClosed, got %v", err)
	}
	if _, err := a.Acquire(e.ctx, e.key("other")); !errors.Is(err, distlock.ErrClosed) {
		e.fail("Acquire after Close: want ErrClosed, got %v", err)
	}
	if err := ls.Release(e.ctx); !errors.Is(err, distlock.ErrNotHeld) {
		e.fail("Release after Close: want ErrNotHeld, got %v", err)
	}
	if err := a.Close(); err != nil {
		e.fail("second Close: %v", err)
	}
}

func closeWakesWaiters(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := e.timeout(long)
		defer cancel()
		_, err := b.Acquire(ctx, key, distlock.WithTTL(long))
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	go func() { _ = b.Close() }()
	select {
	case err := <-errc:
		if !errors.Is(err, distlock.ErrClosed) {
			e.fail("waiting Acquire after Close: want ErrClosed, got %v", err)
		}
	case <-time.After(e.patience()):
		e.fail("Close did not wake the waiting Acquire")
	}
	e.release(ls)
}

func guarantees(e *env) {
	g := e.locker().Guarantees()
	if g.Backend == "" {
		e.fail("Guarantees().Backend is empty")
	}
	switch g.Wait {
	case distlock.WaitPoll, distlock.WaitNotify, distlock.WaitQueue:
	default:
		e.fail("Guarantees().Wait = %q, want poll, notify or queue", g.Wait)
	}
	if g.TokenSource == "" {
		e.fail("Guarantees().TokenSource is empty")
	}
}
