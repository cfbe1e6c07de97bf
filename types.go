package distlock

import (
	"context"
	"time"

	"github.com/distlock/distlock/driver"
)

// Token is a fencing token: it strictly increases, per key, across the
// successive holders of a lock. Pass it to the resource you protect and have
// the resource refuse any token lower than one it has already seen (package
// fencing does this for PostgreSQL).
type Token = driver.Token

// Guarantees is what a backend declares about itself: where its tokens come
// from, how waiters are woken, what failures it tolerates, what its safety
// depends on. Each claim is checked by the backend's tests.
type Guarantees = driver.Guarantees

// WaitMode says how a backend's waiters learn that a key became free.
type WaitMode = driver.WaitMode

// Wait modes.
const (
	WaitPoll   = driver.WaitPoll   // jittered exponential back-off
	WaitNotify = driver.WaitNotify // a release notice, with a bounded fallback poll
	WaitQueue  = driver.WaitQueue  // a server-side queue; the server wakes the next waiter
)

// Observer receives lock events, for metrics and tracing (see package otel).
// Observe must be quick and must not call back into the Locker.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Event is one thing that happened to a lock.
type Event struct {
	Kind     EventKind
	Backend  string // the backend's name, Guarantees().Backend
	Key      string
	Token    Token
	Duration time.Duration
	Err      error
}

// EventKind names a lock event.
type EventKind string

// Event kinds.
const (
	EventAcquired      EventKind = "acquired"       // Duration: time spent acquiring, waits included
	EventAcquireFailed EventKind = "acquire_failed" // Err says why (not acquired, ctx, server)
	EventContended     EventKind = "contended"      // an attempt found the key held
	EventRefreshed     EventKind = "refreshed"      // Duration: the refresh's round trip
	EventRefreshFailed EventKind = "refresh_failed" // Err says why; the lease may still be valid
	EventReleased      EventKind = "released"       // Duration: how long the lease was held
	EventLost          EventKind = "lost"           // Duration: how long it was held; Err says why
)

// Holder is what Locker.Inspect and Locker.Watch report of a key's lock: held
// or free, the holder's token, value and remaining TTL as the server sees
// them, and the number of queued waiters where the backend keeps a queue.
type Holder = driver.Holder

// MaxValueLen is the largest holder value (WithValue) a lock may carry, in
// bytes: enough for a host name, an address and a version, small enough to
// store with the lock on every backend.
const MaxValueLen = 1024
