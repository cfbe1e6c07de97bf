package driver

import (
	"context"
	"errors"
	"time"
)

// Backend is one lock service. Each method is one attempt, usually one round
// trip.
//
// Every capability is a method here, so a wrapper that embeds a Backend
// forwards all of them (one that changes Refresh or Subscribe must change
// RefreshBatch or SubscribeWaiter alike). A backend without one embeds
// [Unsupported], whose methods return ErrUnsupported; the portable layer
// then does without it.
// TryLock, Refresh, Unlock, Inspect, Guarantees and Close are required.
//
// A backend must not keep a lock alive on its own: a lock that is not
// refreshed ends on the server when its TTL runs out (or, for session-bound
// backends, when the session ends), so a crashed or stalled holder cannot
// block a key for longer.
//
// Errors: TryLock and Lock return an error matching distlock.ErrNotAcquired
// (ideally a *distlock.HeldError carrying the holder's remaining time) when
// the key is held; Refresh and Unlock return one matching
// distlock.ErrNotHeld when the key is no longer the grant's. Any other
// error is a failure to reach or use the server; one that means the server
// could not be reached at all should match ErrUnavailable.
type Backend interface {
	// TryLock takes req.Key for req.TTL if nobody holds it, storing
	// req.Owner as proof of ownership, and returns the Grant with a fencing
	// token larger than every token handed out before for that key.
	TryLock(ctx context.Context, req Request) (Grant, error)

	// Lock waits in the server's own queue until req is granted or ctx
	// ends. The portable layer calls it only when Guarantees().Wait is
	// WaitQueue. When ctx ends it must leave nothing behind (its queue
	// entry deleted) and return an error matching ctx.Err().
	Lock(ctx context.Context, req Request) (Grant, error)

	// Subscribe starts a stream of release notices for key. The portable
	// layer calls it only when Guarantees().Wait is WaitNotify. The
	// subscription must see every release from the moment Subscribe
	// returns (or have its first Wait return at once, as the Redis notifier
	// does, once it is sure to). The portable layer subscribes when an
	// attempt finds the key held, then tries once more before it waits, so
	// a release in between is not missed; it still polls, bounded by the
	// holder's remaining TTL, in case a notice is lost.
	Subscribe(ctx context.Context, key string) (Subscription, error)

	// SubscribeWaiter is Subscribe for a backend whose notices depend on
	// who waits: notices addressed to one waiter of its queue (see
	// Dequeue), or ones a waiter's own attempts caused. Notices that waiter
	// need not act on must not wake it. ErrUnsupported: Subscribe is used.
	SubscribeWaiter(ctx context.Context, key, waiter string) (Subscription, error)

	// Dequeue takes waiter out of key's queue, for a backend that keeps a
	// waiting Acquire's Request.Waiter queued between its attempts. The
	// portable layer calls it (in the background, bounded by the release
	// timeout) when such an Acquire ends without the lock, so that the
	// waiter stops holding up those behind it; a grant takes its own waiter
	// out. ErrUnsupported: nothing to do.
	Dequeue(ctx context.Context, key, waiter string) error

	// Refresh extends the grant's lock to ttl from now and returns the
	// validity it may count on, measured from the start of the call
	// (usually ttl).
	Refresh(ctx context.Context, g Grant, ttl time.Duration) (time.Duration, error)

	// RefreshBatch refreshes many grants in one round trip (a pipeline):
	// the portable layer renews the leases that fall due together with one
	// call. Each Refresh in batch gets the outcome Refresh would have given
	// it, in Validity or Err; a returned error fails the whole batch
	// (nothing is known of any of them). ErrUnsupported: the grants are
	// refreshed one by one.
	RefreshBatch(ctx context.Context, batch []Refresh) error

	// Unlock releases the grant's lock only if it still owns it. It is
	// also called with a Grant holding only Key, Owner and TTL (no Token,
	// no Handle) for a TryLock whose outcome is unknown (a timeout, a reset
	// connection): it must then free whatever that attempt may have taken,
	// owner-checked, and return nil once the attempt can hold nothing any
	// more (freed, or refused if it lands later, as Redis's tombstones do),
	// or distlock.ErrNotHeld if it found nothing but the attempt may still land (or
	// if the backend cleans such attempts up itself). The portable layer
	// repeats the call on ErrNotHeld, with back-off, within the release
	// timeout, for at most 64 attempts of a Locker at once: a give-back
	// that ends at once keeps a burst of abandoned attempts under that cap.
	Unlock(ctx context.Context, g Grant) error

	// Inspect reads key's lock without taking it, in one round trip where
	// it can (Redlock reads a majority).
	Inspect(ctx context.Context, key string) (Holder, error)

	// Watch pushes a notice on every change of key's holder: granted,
	// released, expired, lost with a session. Its Subscription's Wait
	// returns once per burst of changes (at least once after each change
	// made since the previous Wait returned); the reader then calls
	// Inspect. ErrUnsupported: the key is watched by release notices where
	// the backend has them, and by polling otherwise.
	Watch(ctx context.Context, key string) (Subscription, error)

	// Guarantees describes the backend.
	Guarantees() Guarantees

	// Close releases the backend's resources (not the locks: the portable
	// layer has released them by then).
	Close() error
}

// ErrUnsupported is returned by a capability the backend does not have.
var ErrUnsupported = errors.New("distlock/driver: not supported by this backend")

// Unsupported is embedded by a backend for the capabilities it lacks: each
// of its methods returns ErrUnsupported.
type Unsupported struct{}

// Lock returns ErrUnsupported.
func (Unsupported) Lock(context.Context, Request) (Grant, error) { return Grant{}, ErrUnsupported }

// Subscribe returns ErrUnsupported.
func (Unsupported) Subscribe(context.Context, string) (Subscription, error) {
	return nil, ErrUnsupported
}

// SubscribeWaiter returns ErrUnsupported.
func (Unsupported) SubscribeWaiter(context.Context, string, string) (Subscription, error) {
	return nil, ErrUnsupported
}

// Dequeue returns ErrUnsupported.
func (Unsupported) Dequeue(context.Context, string, string) error { return ErrUnsupported }

// RefreshBatch returns ErrUnsupported.
func (Unsupported) RefreshBatch(context.Context, []Refresh) error { return ErrUnsupported }

// Watch returns ErrUnsupported.
func (Unsupported) Watch(context.Context, string) (Subscription, error) { return nil, ErrUnsupported }

// Request is one attempt to take a key.
type Request struct {
	Key   string
	TTL   time.Duration
	Owner string // random, unique to this attempt; the backend's ownership proof
	// Drift is the call's clock-drift rule; the portable layer takes
	// Drift.For(TTL) off the validity a backend reports. A backend that
	// judges validity itself (Redlock, per node) uses the same rule.
	Drift Drift
	// Value is the holder's value (WithValue), at most distlock.MaxValueLen bytes:
	// the backend stores it with the lock for Inspect to report; "" means
	// none.
	Value string
	// Waiter is set on every attempt of a waiting Acquire, the same on all
	// of them (its first attempt's Owner), and is "" for TryAcquire: a
	// backend may keep waiters in the order they came (see Dequeuer).
	Waiter string
}

// Grant describes a lock a backend handed out. Key, Owner, TTL and Drift
// are filled in by the portable layer; Unlock gets the lease's current TTL.
type Grant struct {
	Key   string
	Owner string
	TTL   time.Duration
	Drift Drift // the lease's drift rule, for Refresh (Drift.For(ttl))
	Token int64 // the fencing token
	// Validity is how long, from the start of the attempt, the lock is known
	// to be held; zero means the requested TTL.
	Validity time.Duration
	// Start, if set, is when Validity starts counting: the start of the
	// round trip that confirmed ownership. Queueing backends set it, since
	// their call may have waited far longer than a TTL.
	Start time.Time
	// Lost, if not nil, is done when the backend learns the lock is gone
	// (session expired, lease revoked) before the portable layer asks. A
	// context rather than a channel so that the portable layer can watch
	// any number of leases without a goroutine each (context.AfterFunc);
	// make it with context.WithCancel, and share one among the locks of a
	// session.
	Lost context.Context
	// Handle is the backend's own state for this lock (a znode path, a
	// lease ID…). If it has an As(any) bool method, Lease.As reaches it.
	Handle any
}

// Subscription is a stream of release notices for one key.
type Subscription interface {
	// Wait returns nil when a release notice arrived since the previous
	// Wait returned (or since Subscribe), or ctx's error when ctx ends first.
	Wait(ctx context.Context) error
	// Close ends the subscription.
	Close() error
}

// Refresh is one grant of a RefreshBatch call.
type Refresh struct {
	Grant    Grant
	TTL      time.Duration
	Validity time.Duration // set by the backend, as Refresh returns it
	Err      error         // set by the backend, as Refresh returns it
}
