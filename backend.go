package distlock

import (
	"context"
	"time"
)

// Backend is the contract between the portable layer and a lock service.
// Each method is one attempt, usually one round trip. A backend does not
// validate input, retry, sleep, or run renewal goroutines: [New] wraps it in
// the portable layer that does all of that once for every backend.
//
// A backend must not keep a lock alive on its own: a lock that is not
// refreshed ends on the server when its TTL runs out (or, for session-bound
// backends, when the session ends), so a crashed or stalled holder cannot
// block a key for longer.
//
// Errors: TryLock returns an error matching ErrNotAcquired (ideally a
// *HeldError carrying the holder's remaining time) when the key is held;
// Refresh and Unlock return one matching ErrNotHeld when the key is no longer
// the grant's. Any other error is a failure to reach or use the server.
type Backend interface {
	// TryLock takes req.Key for req.TTL if nobody holds it, storing
	// req.Owner as proof of ownership, and returns the Grant with a fencing
	// token larger than every token handed out before for that key.
	TryLock(ctx context.Context, req Request) (Grant, error)

	// Refresh extends the grant's lock to ttl from now and returns the
	// validity it may count on, measured from the start of the call
	// (usually ttl).
	Refresh(ctx context.Context, g Grant, ttl time.Duration) (time.Duration, error)

	// Unlock releases the grant's lock only if it still owns it. It is
	// also called with a Grant holding only Key and Owner (no Token, no
	// Handle) for a TryLock whose outcome is unknown (a timeout, a reset
	// connection): it must then free whatever that attempt may have taken,
	// owner-checked, or return ErrNotHeld if there is nothing (or if the
	// backend cleans such attempts up itself). The portable layer repeats
	// that call, with back-off, within the release timeout.
	Unlock(ctx context.Context, g Grant) error

	// Guarantees describes the backend.
	Guarantees() Guarantees

	// Close releases the backend's resources (not the locks: the portable
	// layer has released them by then).
	Close() error
}

// Request is one attempt to take a key.
type Request struct {
	Key   string
	TTL   time.Duration
	Owner string // random, unique to this attempt; the backend's ownership proof
}

// Grant describes a lock a backend handed out. Key, Owner and TTL are
// filled in by the portable layer; Unlock gets the lease's current TTL.
type Grant struct {
	Key   string
	Owner string
	TTL   time.Duration
	Token Token
	// Validity is how long, from the start of the attempt, the lock is known
	// to be held; zero means the requested TTL.
	Validity time.Duration
	// Start, if set, is when Validity starts counting: the start of the
	// round trip that confirmed ownership. Blockers set it, since their
	// call may have waited far longer than a TTL.
	Start time.Time
	// Lost, if not nil, is closed when the backend learns the lock is gone
	// (session expired, lease revoked) before the portable layer asks.
	Lost <-chan struct{}
	// Handle is the backend's own state for this lock (a znode path, a
	// lease ID…). If it has an As(any) bool method, Lease.As reaches it.
	Handle any
}

// Blocker is an optional Backend interface for services that queue waiters
// themselves (etcd, ZooKeeper): Lock waits in the server's queue until req is
// granted or ctx ends. When ctx ends it must leave nothing behind (its queue
// entry deleted) and return an error matching ctx.Err().
type Blocker interface {
	Lock(ctx context.Context, req Request) (Grant, error)
}

// Notifier is an optional Backend interface for services that can push a
// notice when a key is released (Redis pub/sub). The portable layer subscribes
// before its first attempt so a release between a failed attempt and the wait
// is not missed, and still polls, bounded by the holder's remaining TTL, in
// case a notice is lost.
type Notifier interface {
	Subscribe(ctx context.Context, key string) (Subscription, error)
}

// Subscription is a stream of release notices for one key.
type Subscription interface {
	// Wait returns nil when a release notice arrived since the previous
	// Wait returned (or since Subscribe), or ctx's error when ctx ends first.
	Wait(ctx context.Context) error
	// Close ends the subscription.
	Close() error
}

// Observer receives lock events, for metrics and tracing. Observe must be
// quick and must not call back into the Locker.
type Observer interface {
	Observe(ctx context.Context, e Event)
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

// Event is one thing that happened to a lock.
type Event struct {
	Kind     EventKind
	Backend  string
	Key      string
	Token    Token
	Duration time.Duration
	Err      error
}
