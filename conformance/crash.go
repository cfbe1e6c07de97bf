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
//
// It keeps every capability of the wrapped backend (Lock, Subscribe,
// SubscribeWaiter, RefreshBatch, Dequeue, Inspect, Watch) and forwards As.
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

// RefreshBatch forwards to the backend's driver.BatchRefresher, so that the
// suite renews through the backend's batches; it fails with ErrCrashed
// after crash, and with driver.ErrUnsupported (one by one) if the backend
// has no batches.
func (c *crashable) RefreshBatch(ctx context.Context, batch []driver.Refresh) error {
	if c.crashed.Load() {
		return ErrCrashed
	}
	br, ok := c.Backend.(driver.BatchRefresher)
	if !ok {
		return driver.ErrUnsupported
	}
	return br.RefreshBatch(ctx, batch)
}

// Dequeue forwards to the backend's driver.Dequeuer (nothing to do
// without one); it fails with ErrCrashed after crash, as a crashed process
// leaves its place in a queue behind.
func (c *crashable) Dequeue(ctx context.Context, key, waiter string) error {
	if c.crashed.Load() {
		return ErrCrashed
	}
	if dq, ok := c.Backend.(driver.Dequeuer); ok {
		return dq.Dequeue(ctx, key, waiter)
	}
	return nil
}

// SubscribeWaiter fails with ErrCrashed after crash, else forwards to the
// backend's driver.WaiterSubscriber (to Subscribe without one).
func (c *crashable) SubscribeWaiter(ctx context.Context, key, waiter string) (driver.Subscription, error) {
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	if ws, ok := c.Backend.(driver.WaiterSubscriber); ok {
		return ws.SubscribeWaiter(ctx, key, waiter)
	}
	return c.Backend.Subscribe(ctx, key)
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

// Inspect fails with ErrCrashed after crash, else forwards to the backend's
// driver.Inspector (driver.ErrUnsupported if it has none).
func (c *crashable) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	if c.crashed.Load() {
		return driver.Holder{}, ErrCrashed
	}
	in, ok := c.Backend.(driver.Inspector)
	if !ok {
		return driver.Holder{}, driver.ErrUnsupported
	}
	return in.Inspect(ctx, key)
}

// Watch fails with ErrCrashed after crash, else forwards to the backend's
// driver.Watcher (driver.ErrUnsupported if it has none).
func (c *crashable) Watch(ctx context.Context, key string) (driver.Subscription, error) {
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	w, ok := c.Backend.(driver.Watcher)
	if !ok {
		return nil, driver.ErrUnsupported
	}
	return w.Watch(ctx, key)
}
