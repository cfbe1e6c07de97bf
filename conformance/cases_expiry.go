package conformance

import (
	"time"

	"github.com/distlock/distlock"
)

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
	a, b := e.locker(), e.locker()
	key := e.key("k")
	e.tryAcquire(a, key, distlock.WithTTL(e.h.TTL), distlock.WithAutoRenew(true))
	e.crash(a)
	e.mustBeHeld(b, key, "right after the holder crashed")
	e.release(e.acquire(b, key, distlock.WithTTL(long)))
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
