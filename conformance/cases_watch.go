package conformance

import (
	"context"
	"time"

	"github.com/distlock/distlock"
)

// fastPoll bounds the polling of Watch and Observe on backends without
// server watches, so the cases need not wait out the default cap.
var fastPoll = distlock.WithBackoff(5*time.Millisecond, 100*time.Millisecond)

// noticeBound is how soon Watch must report a grant or a release: far
// above a push or a 100ms poll, well below a lost notice's fallback poll.
const noticeBound = 2500 * time.Millisecond

// nextChange reads the next value of ch, failing the case if none comes
// within patience or ch closes.
func nextChange[T any](e *env, ch <-chan T, what string) T {
	return nextWithin(e, ch, e.patience(), what)
}

func nextWithin[T any](e *env, ch <-chan T, within time.Duration, what string) T {
	select {
	case v, ok := <-ch:
		if !ok {
			e.fail("%s: the channel closed", what)
		}
		return v
	case <-time.After(within):
		e.fail("%s: nothing within %v", what, within)
	case <-e.ctx.Done():
		e.fail("%s: %v", what, e.ctx.Err())
	}
	panic("unreachable")
}

// mustClose waits for ch to close, draining it.
func mustClose[T any](e *env, ch <-chan T, why string) {
	deadline := time.After(e.patience())
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			e.fail("%s: the channel did not close within %v", why, e.patience())
		}
	}
}

func watchSeesChanges(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := b.Watch(ctx, key, fastPoll)
	if err != nil {
		e.fail("Watch(%q): %v", key, err)
	}
	expect := func(ls *distlock.Lease, v, why string) {
		within := noticeBound
		if ls == nil && why != "a release" && why != "the next release" {
			within = e.patience() // an end on the server: a TTL or a session timeout away
		}
		h := nextWithin(e, ch, within, why)
		switch {
		case ls == nil && h.Held:
			e.fail("%s: Watch reported %s, want the key free", why, holderString(h))
		case ls != nil && (!h.Held || h.Token != ls.Token() || h.Value != v):
			e.fail("%s: Watch reported %s, want held with token %d and value %q", why, holderString(h), ls.Token(), v)
		}
	}
	expect(nil, "", "the first report of a free key")
	first := e.tryAcquire(a, key, distlock.WithTTL(long), distlock.WithValue("first"))
	expect(first, "first", "a grant")
	e.release(first)
	expect(nil, "", "a release")
	second := e.tryAcquire(a, key, distlock.WithTTL(long), distlock.WithValue("second"))
	expect(second, "second", "the next grant")
	e.release(second)
	expect(nil, "", "the next release")

	// A lock that ends on the server without a release: the crash of its
	// holder (its TTL or session runs out), or else its TTL.
	switch {
	case e.h.Crash != nil:
		c := e.locker()
		ls := e.tryAcquire(c, key, distlock.WithTTL(e.h.TTL), distlock.WithAutoRenew(true), distlock.WithValue("crashing"))
		expect(ls, "crashing", "a grant to a holder about to crash")
		e.crash(c)
		expect(nil, "", "the end of a crashed holder's lock")
	case !e.sessionTTL(a):
		ls := e.tryAcquire(a, key, distlock.WithTTL(e.h.TTL), distlock.WithValue("expiring"))
		expect(ls, "expiring", "a grant left to expire")
		expect(nil, "", "an expiry")
	}
	cancel()
	mustClose(e, ch, "Watch after its context ended")

	ch2, err := b.Watch(e.ctx, key)
	if err != nil {
		e.fail("Watch(%q): %v", key, err)
	}
	nextChange(e, ch2, "the first report of a second Watch")
	_ = b.Close()
	mustClose(e, ch2, "Watch after its Locker closed")
	if _, err := b.Watch(e.ctx, key); err == nil {
		e.fail("Watch on a closed Locker succeeded")
	}
}
