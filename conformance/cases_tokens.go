package conformance

import "github.com/distlock/distlock"

func tokensAfterCrash(e *env) {
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
