// Package distlock gives one lock API over several coordination services
// (in-process memory, single Redis, Redlock, etcd, ZooKeeper), hands out a
// fencing token with every lock, and lets a database reject the writes of a
// holder whose lock has already passed to someone else (see package fencing).
//
// Users program against [Locker]. Every backend package returns one, and
// [Open] returns one from a URL such as "mem://", "redis://host:6379" or
// "etcd://host:2379", so the backend is a matter of configuration.
//
// A lock can be lost without its holder knowing: a GC pause, a network delay,
// a clock jump or a failover can outlast the TTL. distlock limits the damage
// in two ways. Every [Lease] keeps a conservative local deadline (attempt
// start + validity − drift) and reports the lease lost on [Lease.Done] once
// the deadline passes without a successful refresh. And every lease carries a
// [Token] that strictly increases per key across holders, so a resource that
// checks tokens can refuse a stale holder outright.
//
// The shared behaviour — validation, blocking acquire, back-off, renewal,
// loss detection, Close — is written once in this package; a backend only
// implements driver.Backend (package driver), a handful of single
// round-trip operations, and [New] turns it into a Locker.
package distlock

import (
	"context"
	"time"
)

// Fence is what a guarded write presents to the resource: the Locker's fence
// epoch, the lease's token and an id of the holder that was granted it. A
// resource compares (Epoch, Token) pairs: it accepts a pair larger than any
// it has seen, and an equal pair only from the holder that wrote it (so two
// holders can never both pass with one token, even if a backend handed the
// same token out twice). Get it from [Lease.Fence].
type Fence struct {
	// Epoch is the deployment's fence epoch (WithFenceEpoch): raised when the
	// key space moves to another backend or cluster, whose tokens are not
	// comparable with the old ones. A larger epoch wins whatever its token.
	Epoch  int64
	Token  Token
	Holder string // opaque, unique per lease; never the lease's ownership secret
}

// Locker hands out leases on named keys. All methods are safe for concurrent
// use. A Locker holds connections and background work; Close it when done.
type Locker interface {
	// Acquire takes the lock on key, waiting while another holder has it,
	// until ctx ends. A wait cut short by ctx returns an error that matches
	// both ErrNotAcquired and ctx.Err() with errors.Is.
	Acquire(ctx context.Context, key string, opts ...CallOption) (*Lease, error)

	// TryAcquire makes one attempt and returns ErrNotAcquired (possibly a
	// *HeldError) at once if another holder has the key.
	TryAcquire(ctx context.Context, key string, opts ...CallOption) (*Lease, error)

	// Do acquires key (waiting like Acquire), runs fn while the lease is
	// kept renewed, and releases afterwards. fn's context is cancelled the
	// moment the lease is lost; Do then returns an error matching
	// ErrLeaseLost, joined with fn's own error if any.
	Do(ctx context.Context, key string, fn func(ctx context.Context, lease *Lease) error, opts ...CallOption) error

	// Inspect reports key's lock as the server sees it, without taking it:
	// whether it is held, the holder's token, value (WithValue) and
	// remaining TTL, and the queued waiters where the backend keeps a
	// queue. What it reports may be out of date by the time it returns;
	// never decide to write on it (a lease's Token does that). It reports
	// the lock the server has, which for a moment may be an attempt whose
	// caller gave up (a context that ended mid-call) until the attempt is
	// given back: such a holder has no Lease, so it can write nothing
	// through a fence.
	Inspect(ctx context.Context, key string) (Holder, error)

	// Watch reports key's holder now, then at each change: a new holder
	// or the key becoming free. Every holder it reports has a larger token
	// than the holders reported before it, and is reported once: after a
	// server loses writes (a restart from an older snapshot, a failover to
	// a lagging replica) and shows an earlier holder again, Watch does not
	// report it: the next report is the key free or a holder with a larger
	// token. Changes are pushed where the backend can (etcd and
	// ZooKeeper watches, the memory store); elsewhere (Redis, Redlock)
	// release notices and polling find them: a new holder within the
	// back-off cap (WithBackoff's max, 500ms by default), an expiry at the
	// TTL the server reported. Changes faster than that may be seen only
	// as their last state. Server errors are retried with back-off and
	// logged, not reported. The channel is closed when ctx ends or the
	// Locker closes; read it until then.
	Watch(ctx context.Context, key string, opts ...CallOption) (<-chan Holder, error)

	// Guarantees describes what this backend promises and what it does not.
	Guarantees() Guarantees

	// Close stops background work, releases the leases still held (best
	// effort, bounded by the release timeout), ends their Done channels with
	// ErrClosed, wakes waiting Acquire calls with ErrClosed and closes the
	// backend. Acquire, TryAcquire and Do on a closed Locker return
	// ErrClosed; Close itself may be called again and returns nil.
	Close() error
}

// As reports whether the Locker gives access to an underlying client of the
// type target points to, and if so stores it there — for example a
// *redis.Client or a *clientv3.Client. It is the escape hatch for what the
// portable API does not cover; see each backend's docs for the types it
// offers.
func As(l Locker, target any) bool {
	a, ok := l.(interface{ As(any) bool })
	return ok && a.As(target)
}

// clock is the source of time for the portable layer; a variable so a test
// could move it, but production code always uses the monotonic wall clock.
var now = time.Now
