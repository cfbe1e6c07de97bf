package distlock

import "github.com/distlock/distlock/driver"

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

// HeldError is returned (wrapped) by a failed attempt on a key someone else
// holds. It matches ErrNotAcquired. RetryAfter, when positive, is how long the
// current holder's lock has left, as the server reported it.
type HeldError = driver.HeldError

// Observer receives lock events, for metrics and tracing (see package otel).
// Observe must be quick and must not call back into the Locker.
type Observer = driver.Observer

// Event is one thing that happened to a lock.
type Event = driver.Event

// EventKind names a lock event.
type EventKind = driver.EventKind

// Event kinds.
const (
	EventAcquired      = driver.EventAcquired      // Duration: time spent acquiring, waits included
	EventAcquireFailed = driver.EventAcquireFailed // Err says why (not acquired, ctx, server)
	EventContended     = driver.EventContended     // an attempt found the key held
	EventRefreshed     = driver.EventRefreshed     // Duration: the refresh's round trip
	EventRefreshFailed = driver.EventRefreshFailed // Err says why; the lease may still be valid
	EventReleased      = driver.EventReleased      // Duration: how long the lease was held
	EventLost          = driver.EventLost          // Duration: how long it was held; Err says why
)

// Holder is what Locker.Inspect and Locker.Watch report of a key's lock: held
// or free, the holder's token, value and remaining TTL as the server sees
// them, and the number of queued waiters where the backend keeps a queue.
type Holder = driver.Holder

// MaxValueLen is the largest value WithValue takes, in bytes.
const MaxValueLen = driver.MaxValueLen
