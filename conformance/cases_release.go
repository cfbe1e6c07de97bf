package conformance

import (
	"errors"
	"time"

	"github.com/distlock/distlock"
)

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
