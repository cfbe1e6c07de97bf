package conformance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
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
// A Crashable forwards Subscribe (Notifier) and As; pass Backend() rather
// than the Crashable itself to distlock.New when the wrapped backend is a
// Blocker, so its server-side queue stays in use.
type Crashable struct {
	distlock.Backend
	crashed atomic.Bool
}

// NewCrashable wraps b.
func NewCrashable(b distlock.Backend) *Crashable { return &Crashable{Backend: b} }

// Crashed reports whether Crash was called.
func (c *Crashable) Crashed() bool { return c.crashed.Load() }

// Blocking returns c as a Backend that also implements distlock.Blocker
// when the wrapped backend does; otherwise c itself.
func (c *Crashable) Blocking() distlock.Backend {
	if _, ok := c.Backend.(distlock.Blocker); ok {
		return crashableBlocker{c}
	}
	return c
}

type crashableBlocker struct{ *Crashable }

func (c crashableBlocker) Lock(ctx context.Context, req distlock.Request) (distlock.Grant, error) {
	if c.crashed.Load() {
		return distlock.Grant{}, ErrCrashed
	}
	return c.Backend.(distlock.Blocker).Lock(ctx, req)
}

// Crash makes every later call fail.
func (c *Crashable) Crash() { c.crashed.Store(true) }

// TryLock fails with ErrCrashed after Crash, else forwards.
func (c *Crashable) TryLock(ctx context.Context, req distlock.Request) (distlock.Grant, error) {
	if c.crashed.Load() {
		return distlock.Grant{}, ErrCrashed
	}
	return c.Backend.TryLock(ctx, req)
}

// Refresh fails with ErrCrashed after Crash, else forwards.
func (c *Crashable) Refresh(ctx context.Context, g distlock.Grant, ttl time.Duration) (time.Duration, error) {
	if c.crashed.Load() {
		return 0, ErrCrashed
	}
	return c.Backend.Refresh(ctx, g, ttl)
}

// Unlock fails with ErrCrashed after Crash, else forwards.
func (c *Crashable) Unlock(ctx context.Context, g distlock.Grant) error {
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

// Subscribe forwards to the wrapped backend's Notifier, if it has one.
func (c *Crashable) Subscribe(ctx context.Context, key string) (distlock.Subscription, error) {
	n, ok := c.Backend.(distlock.Notifier)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	if c.crashed.Load() {
		return nil, ErrCrashed
	}
	return n.Subscribe(ctx, key)
}

// As forwards to the wrapped backend.
func (c *Crashable) As(target any) bool {
	a, ok := c.Backend.(interface{ As(any) bool })
	return ok && a.As(target)
}
