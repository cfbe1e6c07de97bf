package conformance

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// inspect reads key from l, failing the case on an error.
func (e *env) inspect(l distlock.Locker, key, why string) distlock.Holder {
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	h, err := l.Inspect(ctx, key)
	if err != nil {
		e.fail("%s: Inspect(%q): %v", why, key, err)
	}
	return h
}

// queues reports whether l's backend keeps its waiters in a queue on the
// server, which Inspect counts: waiters that watch their place (WaitQueue),
// or that are woken in the order they came (FIFO).
func queues(l distlock.Locker) bool {
	g := l.Guarantees()
	return g.Wait == distlock.WaitQueue || g.FIFO
}

// noWaiters is the Waiters of a key nobody waits for: 0 where the backend
// keeps a queue, -1 where it does not.
func noWaiters(l distlock.Locker) int {
	if queues(l) {
		return 0
	}
	return -1
}

// mustBeFree checks that Inspect reports key free, with nothing of a former
// holder left in the other fields.
func (e *env) mustBeFree(l distlock.Locker, key, why string) {
	h := e.inspect(l, key, why)
	if h != (distlock.Holder{Waiters: noWaiters(l)}) {
		e.fail("%s: Inspect(%q) = %+v, want a free key (Held false, zero token, value and TTL, Waiters %d)", why, key, h, noWaiters(l))
	}
}

// mustShow checks that Inspect reports ls as the holder, with value v.
func (e *env) mustShow(l distlock.Locker, ls *distlock.Lease, v, why string) {
	h := e.inspect(l, ls.Key(), why)
	switch {
	case !h.Held:
		e.fail("%s: Inspect(%q) says free while a lease holds it", why, ls.Key())
	case h.Token != ls.Token():
		e.fail("%s: Inspect token %d, the holder's lease has %d", why, h.Token, ls.Token())
	case h.Value != v:
		e.fail("%s: Inspect value %q (%d bytes), the holder gave %q (%d bytes)", why, clip(h.Value), len(h.Value), clip(v), len(v))
	case h.TTL < 0 || h.TTL > ls.TTL()+ttlRounding:
		e.fail("%s: Inspect TTL %v, want within [0, the lease's TTL %v + %v]", why, h.TTL, ls.TTL(), ttlRounding)
	case h.TTL == 0 && !e.sessionTTL(l):
		e.fail("%s: Inspect TTL 0 on a backend that times locks (only session-bound backends may report 0)", why)
	}
}

// ttlRounding is how far a server's TTL may exceed the lease's: etcd grants
// whole seconds, rounded up, plus one for the round trip.
const ttlRounding = 2 * time.Second

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func inspectFree(e *env) {
	l := e.locker()
	e.mustBeFree(l, e.key("never-held"), "a key never taken")
	ls := e.tryAcquire(l, e.key("k"), distlock.WithTTL(long))
	e.release(ls)
	e.mustBeFree(e.locker(), ls.Key(), "after Release")
}

func inspectHolder(e *env) {
	a, b := e.locker(), e.locker()
	const v = "host-a:8080 v1.2.3"
	ls := e.tryAcquire(a, e.key("k"), distlock.WithTTL(long), distlock.WithValue(v))
	if ls.Value() != v {
		e.fail("Lease.Value() = %q, want %q", ls.Value(), v)
	}
	e.mustShow(b, ls, v, "from another Locker")
	e.mustShow(a, ls, v, "from the holder's Locker")
	bare := e.tryAcquire(a, e.key("bare"), distlock.WithTTL(long))
	e.mustShow(b, bare, "", "a holder without a value")
	e.release(ls)
	e.release(bare)
}

func inspectNewHolder(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	first := e.tryAcquire(a, key, distlock.WithTTL(long), distlock.WithValue("first"))
	e.mustShow(b, first, "first", "the first holder")
	e.release(first)
	second := e.tryAcquire(b, key, distlock.WithTTL(long))
	e.mustShow(a, second, "", "the next holder, which gave no value, after a holder that gave one")
	e.release(second)
	third := e.tryAcquire(a, key, distlock.WithTTL(long), distlock.WithValue("third"))
	e.mustShow(b, third, "third", "the holder after that")
	e.release(third)
}

func inspectAfterCrash(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(e.h.TTL), distlock.WithAutoRenew(true), distlock.WithValue("crashed"))
	e.crash(a)
	e.mustShow(b, ls, "crashed", "right after the holder crashed")
	next := e.acquire(b, key, distlock.WithTTL(long))
	e.mustShow(b, next, "", "the holder after a crashed one (its value must not linger)")
	if next.Token() <= ls.Token() {
		e.fail("token %d after the crashed holder's %d", next.Token(), ls.Token())
	}
	e.release(next)
	e.mustBeFree(b, key, "after the next holder released")
}

func inspectValueBounds(e *env) {
	l := e.locker()
	var sb strings.Builder
	for i := 0; sb.Len() < distlock.MaxValueLen; i++ {
		sb.WriteByte(byte(i)) // every byte value: values are opaque bytes
	}
	v := sb.String()
	ls := e.tryAcquire(l, e.key("max"), distlock.WithTTL(long), distlock.WithValue(v))
	e.mustShow(e.locker(), ls, v, "a value of MaxValueLen bytes")
	e.release(ls)
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	over, err := l.TryAcquire(ctx, e.key("over"), distlock.WithValue(v+"x"))
	if err == nil {
		_ = over.Release(ctx)
		e.fail("TryAcquire with a value of MaxValueLen+1 bytes succeeded")
	}
	if !errors.Is(err, distlock.ErrInvalidOption) {
		e.fail("TryAcquire with a value of MaxValueLen+1 bytes: %v, want ErrInvalidOption", err)
	}
	e.mustBeFree(l, e.key("over"), "after an acquire refused for its value")
	for _, bad := range []string{"", strings.Repeat("k", distlock.MaxKeyLen+1), "a\x00b"} {
		if _, err := l.Inspect(ctx, bad); !errors.Is(err, distlock.ErrInvalidKey) {
			e.fail("Inspect(%q): %v, want ErrInvalidKey", clip(bad), err)
		}
		if _, err := l.Watch(ctx, bad); !errors.Is(err, distlock.ErrInvalidKey) {
			e.fail("Watch(%q): %v, want ErrInvalidKey", clip(bad), err)
		}
	}
}

func inspectWaiters(e *env) {
	a := e.locker()
	if !queues(a) {
		e.mustBeFree(a, e.key("k"), "Waiters of a backend without a queue")
		return // -1 checked by mustBeFree
	}
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	waiters := []distlock.Locker{e.locker(), e.locker()}
	stop := make([]context.CancelFunc, len(waiters))
	for i, w := range waiters {
		wctx, wcancel := context.WithCancel(ctx)
		stop[i] = wcancel
		go func() { _, _ = w.Acquire(wctx, key, distlock.WithTTL(long)) }()
	}
	e.eventually("two Acquire calls queued", func() (bool, string) {
		h := e.inspect(a, key, "while two callers wait")
		return h.Held && h.Token == ls.Token() && h.Waiters == 2, "Inspect: " + holderString(h)
	})
	stop[0]()
	e.eventually("one queued Acquire left after the other was cancelled", func() (bool, string) {
		h := e.inspect(a, key, "after one waiter gave up")
		return h.Held && h.Waiters == 1, "Inspect: " + holderString(h)
	})
	stop[1]()
	e.eventually("no waiter left", func() (bool, string) {
		h := e.inspect(a, key, "after both waiters gave up")
		return h.Held && h.Waiters == 0, "Inspect: " + holderString(h)
	})
	e.release(ls)
}

func holderString(h distlock.Holder) string {
	if !h.Held {
		return "free, waiters " + itoa(h.Waiters)
	}
	return "held, token " + h.Token.String() + ", value " + clip(h.Value) + ", ttl " + h.TTL.String() + ", waiters " + itoa(h.Waiters)
}

func itoa(n int) string { return distlock.Token(n).String() }

// eventually polls cond until it holds or patience runs out.
func (e *env) eventually(what string, cond func() (bool, string)) {
	deadline := time.Now().Add(e.patience())
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.fail("%s: not within %v (%s)", what, e.patience(), last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
