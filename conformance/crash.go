package conformance

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// ErrCrashed is what a crashed backend returns from every call.
var ErrCrashed = errors.New("conformance: backend crashed")

// crashable is the switch the suite puts under every Locker: after crash
// every call of the backend fails with ErrCrashed, as calls from a dead
// process would never arrive, and the server keeps the locks until their
// TTL. Backends with client-side sessions or keep-alives stop those in
// Harness.Crash.
// It forwards As.
type crashable struct {
	driver.Backend
	crashed atomic.Bool
}

// Lock fails with ErrCrashed after crash, else forwards.
func (c *crashable) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if c.crashed.Load() {
		return driver.Grant{}, ErrCrashed
	}
	return c.Backend.Lock(ctx, req)
}

// crash makes every later call fail.
func (c *crashable) crash() { c.crashed.Store(true) }

// TryLock fails with ErrCrashed after crash, else forwards.
func (c *crashable) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if c.crashed.Load() {
		return driver.Grant{}, ErrCrashed
	}
	return c.Backend.TryLock(ctx, req)
}

// Refresh fails with ErrCrashed after crash, else forwards.
func (c *crashable) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if c.crashed.Load() {
		return 0, ErrCrashed
	}
	return c.Backend.Refresh(ctx, g, ttl)
}

// RefreshBatch fails with ErrCrashed after crash, else forwards.
func (c *crashable) RefreshBatch(ctx context.Context, batch []driver.Refresh) error {
	if c.crashed.Load() {
		return ErrCrashed
	}
	return c.Backend.RefreshBatch(ctx, batch)
}

// Dequeue fails with ErrCrashed after crash, as a crashed process leaves
// its place in a queue behind, else forwards.
func (c *crashable) Dequeue(ctx context.Context, key, waiter string) error {
	if c.crashed.Load() {
		return ErrCrashed
	}
	return c.Backend.Dequeue(ctx, key, waiter)
}

// SubscribeWaiter fails with ErrCrashed after crash, else forwards.
func (c *crashable) SubscribeWaiter(ctx context.Context, key, waiter string) (driver.Subscription, error) {
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	return c.Backend.SubscribeWaiter(ctx, key, waiter)
}

// Unlock fails with ErrCrashed after crash, else forwards.
func (c *crashable) Unlock(ctx context.Context, g driver.Grant) error {
	if c.crashed.Load() {
		return ErrCrashed
	}
	return c.Backend.Unlock(ctx, g)
}

// Subscribe fails with ErrCrashed after crash, else forwards.
func (c *crashable) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	return c.Backend.Subscribe(ctx, key)
}

// As forwards to the wrapped backend.
func (c *crashable) As(target any) bool {
	a, ok := c.Backend.(interface{ As(any) bool })
	return ok && a.As(target)
}

// Inspect fails with ErrCrashed after crash, else forwards.
func (c *crashable) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	if c.crashed.Load() {
		return driver.Holder{}, ErrCrashed
	}
	return c.Backend.Inspect(ctx, key)
}

// Watch fails with ErrCrashed after crash, else forwards.
func (c *crashable) Watch(ctx context.Context, key string) (driver.Subscription, error) {
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	return c.Backend.Watch(ctx, key)
}
