package conformance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// ErrCrashed is what a crashed backend returns from every call.
var ErrCrashed = errors.New("conformance: backend crashed")

// Crashable wraps a Backend so a harness can crash it: after Crash every
// call fails with ErrCrashed, as calls from a dead process would never
// arrive, and the server keeps the locks until their TTL. It fits backends
// whose locks live only as long as their TTL (Redis, memory); backends with
// client-side sessions (ZooKeeper) must also drop the session's connection
// without ending the session.
//
// A Crashable keeps every capability of the wrapped backend (Lock,
// Subscribe, SubscribeWaiter, RefreshBatch, Dequeue, Inspect, Watch) and
// forwards As.
type Crashable struct {
	driver.Backend
	crashed atomic.Bool
}

// NewCrashable wraps b.
func NewCrashable(b driver.Backend) *Crashable { return &Crashable{Backend: b} }

// Crashed reports whether Crash was called.
func (c *Crashable) Crashed() bool { return c.crashed.Load() }

// Lock fails with ErrCrashed after Crash, else forwards.
func (c *Crashable) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if c.crashed.Load() {
		return driver.Grant{}, ErrCrashed
	}
	return c.Backend.Lock(ctx, req)
}

// Crash makes every later call fail.
func (c *Crashable) Crash() { c.crashed.Store(true) }

// TryLock fails with ErrCrashed after Crash, else forwards.
func (c *Crashable) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if c.crashed.Load() {
		return driver.Grant{}, ErrCrashed
	}
	return c.Backend.TryLock(ctx, req)
}

// Refresh fails with ErrCrashed after Crash, else forwards.
func (c *Crashable) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if c.crashed.Load() {
		return 0, ErrCrashed
	}
	return c.Backend.Refresh(ctx, g, ttl)
}

// RefreshBatch forwards to the backend's driver.BatchRefresher, so that the
// suite renews through the backend's batches; it fails with ErrCrashed
// after Crash, and with driver.ErrUnsupported (one by one) if the backend
// has no batches.
func (c *Crashable) RefreshBatch(ctx context.Context, batch []driver.Refresh) error {
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
// without one); it fails with ErrCrashed after Crash, as a crashed process
// leaves its place in a queue behind.
func (c *Crashable) Dequeue(ctx context.Context, key, waiter string) error {
	if c.crashed.Load() {
		return ErrCrashed
	}
	if dq, ok := c.Backend.(driver.Dequeuer); ok {
		return dq.Dequeue(ctx, key, waiter)
	}
	return nil
}

// SubscribeWaiter fails with ErrCrashed after Crash, else forwards to the
// backend's driver.WaiterSubscriber (to Subscribe without one).
func (c *Crashable) SubscribeWaiter(ctx context.Context, key, waiter string) (driver.Subscription, error) {
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	if ws, ok := c.Backend.(driver.WaiterSubscriber); ok {
		return ws.SubscribeWaiter(ctx, key, waiter)
	}
	return c.Backend.Subscribe(ctx, key)
}

// Unlock fails with ErrCrashed after Crash, else forwards.
func (c *Crashable) Unlock(ctx context.Context, g driver.Grant) error {
	if c.crashed.Load() {
		return ErrCrashed
	}
	return c.Backend.Unlock(ctx, g)
}

// CrashRegistry maps the Lockers a harness made to the Crashables under
// them, so Harness.Crash can find the one to crash.
type CrashRegistry struct {
	mu sync.Mutex
	m  map[distlock.Locker]*Crashable
}

// Add records that l runs on c and returns l.
func (r *CrashRegistry) Add(l distlock.Locker, c *Crashable) distlock.Locker {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[distlock.Locker]*Crashable)
	}
	r.m[l] = c
	return l
}

// Crash crashes l's backend; it fits Harness.Crash.
func (r *CrashRegistry) Crash(_ context.Context, l distlock.Locker) error {
	r.mu.Lock()
	c := r.m[l]
	r.mu.Unlock()
	if c == nil {
		return errors.New("conformance: Locker not made through this CrashRegistry")
	}
	c.Crash()
	return nil
}

// Subscribe fails with ErrCrashed after Crash, else forwards.
func (c *Crashable) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	return c.Backend.Subscribe(ctx, key)
}

// As forwards to the wrapped backend.
func (c *Crashable) As(target any) bool {
	a, ok := c.Backend.(interface{ As(any) bool })
	return ok && a.As(target)
}

// Inspect fails with ErrCrashed after Crash, else forwards to the backend's
// driver.Inspector (driver.ErrUnsupported if it has none).
func (c *Crashable) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	if c.crashed.Load() {
		return driver.Holder{}, ErrCrashed
	}
	in, ok := c.Backend.(driver.Inspector)
	if !ok {
		return driver.Holder{}, driver.ErrUnsupported
	}
	return in.Inspect(ctx, key)
}

// Watch fails with ErrCrashed after Crash, else forwards to the backend's
// driver.Watcher (driver.ErrUnsupported if it has none).
func (c *Crashable) Watch(ctx context.Context, key string) (driver.Subscription, error) {
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	w, ok := c.Backend.(driver.Watcher)
	if !ok {
		return nil, driver.ErrUnsupported
	}
	return w.Watch(ctx, key)
}
