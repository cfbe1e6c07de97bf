package distlock

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/distlock/distlock/driver"
)

// Token is a fencing token: it strictly increases, per key, across the
// successive holders of a lock. Pass it to the resource you protect and have
// the resource refuse any token lower than one it has already seen (package
// fencing does this for PostgreSQL).
type Token int64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatInt(int64(t), 10) }

// Guarantees is what a backend declares about itself: where its tokens come
// from, how waiters are woken, what failures it tolerates, what its safety
// depends on. Each claim is checked by the backend's tests; a claim no test
// checks is left at its zero value.
type Guarantees struct {
	// Backend is the backend's short name, e.g. "redis".
	Backend string
	// TokenSource says where fencing tokens come from.
	TokenSource string
	// Wait says how waiters are woken.
	Wait WaitMode
	// FIFO is true when waiters acquire in the order they started waiting.
	FIFO bool
	// FailuresTolerated is how many servers can fail without losing safety
	// or availability (0 for a single server).
	FailuresTolerated int
	// ClockDependent is true when mutual exclusion relies on bounded clock
	// drift between servers and clients (timed leases on independent nodes).
	ClockDependent bool
	// RestartLosesLocks is true when a server crash, restart or failover can
	// drop held locks (e.g. Redis without fsync).
	RestartLosesLocks bool
	// SessionTTL is true when a lock lives as long as the client's session
	// and the TTL option sets nothing per lease (ZooKeeper).
	SessionTTL bool
	// SingleProcess is true when locks are only seen inside one process.
	SingleProcess bool
	// Notes are caveats worth reading before choosing the backend.
	Notes []string
}

// guaranteesOf returns what b declares, as users read it.
func guaranteesOf(b driver.Backend) Guarantees {
	g := b.Guarantees()
	return Guarantees{
		Backend: g.Backend, TokenSource: g.TokenSource, Wait: WaitMode(g.Wait), FIFO: g.FIFO,
		FailuresTolerated: g.FailuresTolerated, ClockDependent: g.ClockDependent,
		RestartLosesLocks: g.RestartLosesLocks, SessionTTL: g.SessionTTL,
		SingleProcess: g.SingleProcess, Notes: slices.Clone(g.Notes),
	}
}

// WaitMode says how a backend's waiters learn that a key became free.
type WaitMode string

// Wait modes.
const (
	WaitPoll   WaitMode = "poll"   // jittered exponential back-off
	WaitNotify WaitMode = "notify" // a release notice, with a bounded fallback poll
	WaitQueue  WaitMode = "queue"  // a server-side queue; the server wakes the next waiter
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

// Holder is what Locker.Inspect and Locker.Watch report of a key's lock, as
// the server sees it.
type Holder struct {
	// Held is false when nobody holds the key; the other fields are then
	// zero, except Waiters.
	Held bool
	// Token is the holder's fencing token (its Lease.Token).
	Token Token
	// Value is the holder's value (WithValue), "" if it gave none.
	Value string
	// TTL is how long the holder's lock has left unless it is refreshed, as
	// the server counts it; 0 when the backend does not time locks one by
	// one (ZooKeeper: the lock lasts as long as its holder's session).
	TTL time.Duration
	// Waiters is the number of callers queued for the key on the server,
	// or -1 where the backend keeps no queue (Redis without a fair queue,
	// Redlock, memory).
	Waiters int
}

// MaxValueLen is the largest holder value (WithValue) a lock may carry, in
// bytes: enough for a host name, an address and a version, small enough to
// store with the lock on every backend.
const MaxValueLen = 1024
