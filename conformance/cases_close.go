package conformance

import (
	"errors"
	"time"

	"github.com/distlock/distlock"
)

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
