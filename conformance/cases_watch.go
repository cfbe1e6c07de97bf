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
	// holder (its TTL or session runs out).
	c := e.locker()
	ls := e.tryAcquire(c, key, distlock.WithTTL(e.h.TTL), distlock.WithAutoRenew(true), distlock.WithValue("crashing"))
	expect(ls, "crashing", "a grant to a holder about to crash")
	e.crash(c)
	expect(nil, "", "the end of a crashed holder's lock")
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

func watchTokensIncrease(e *env) {
	a, waiter, b := e.locker(), e.locker(), e.locker()
	key := e.key("k")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := b.Watch(ctx, key, fastPoll)
	if err != nil {
		e.fail("Watch(%q): %v", key, err)
	}
	var top distlock.Token // the largest token reported
	// next reads the next report and checks it against those before it.
	next := func(why string) distlock.Holder {
		h := nextChange(e, ch, why)
		if h.Held && h.Token <= top {
			e.fail("%s: Watch reported %s after a holder with token %d", why, holderString(h), top)
		}
		if h.Held {
			top = h.Token
		}
		return h
	}
	// seen reads reports until Watch reports ls; each holder stays until
	// then, so a backend that polls sees every one.
	seen := func(ls *distlock.Lease, why string) {
		for {
			if h := next(why); h.Held && h.Token == ls.Token() {
				return
			}
		}
	}

	first := e.tryAcquire(a, key, distlock.WithTTL(long), distlock.WithValue("first"))
	seen(first, "a grant")
	e.release(first)
	second := e.tryAcquire(a, key, distlock.WithTTL(long), distlock.WithValue("second"))
	seen(second, "the next grant")

	// A hand-over to a waiter.
	handed := make(chan *distlock.Lease, 1)
	failed := make(chan error, 1)
	go func() {
		wctx, wcancel := e.timeout(e.patience())
		defer wcancel()
		ls, err := waiter.Acquire(wctx, key, distlock.WithTTL(long), distlock.WithValue("third"))
		if err != nil {
			failed <- err
			return
		}
		handed <- ls
	}()
	time.Sleep(50 * time.Millisecond) // let the waiter wait, so the release hands over
	e.release(second)
	var third *distlock.Lease
	select {
	case third = <-handed:
	case err := <-failed:
		e.fail("a waiting Acquire after the holder released: %v", err)
	}
	seen(third, "a hand-over to a waiter")

	// An end on the server, where the harness can force one.
	if e.h.ForceExpire != nil {
		e.endOnServer(key)
	} else {
		e.release(third)
	}
	fourth := e.tryAcquire(a, key, distlock.WithTTL(long), distlock.WithValue("fourth"))
	seen(fourth, "a grant after the previous lock ended")
	e.release(fourth)
	if h := next("the last release"); h.Held {
		e.fail("the last release: Watch reported %s, want the key free", holderString(h))
	}
}
