package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/distlock"
)

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
