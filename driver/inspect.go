package driver

import (
	"context"
	"time"
)

// Holder is what Inspect reports of a key's lock, as the server sees it.
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

// Inspector is an optional interface of a Backend: it reads a key's lock
// without taking it, in one round trip where it can (Redlock reads a
// majority). Every backend of this module implements it; the portable
// layer returns ErrUnsupported for one that does not.
type Inspector interface {
	Inspect(ctx context.Context, key string) (Holder, error)
}

// Watcher is an optional interface of a Backend that pushes a notice on
// every change of a key's holder: granted, released, expired, lost with a
// session. Its Subscription's Wait returns once per burst of changes (at
// least once after each change made since the previous Wait returned); the
// reader then calls Inspect. Backends without it are watched by release
// notices (Subscribe) where they have them, and by polling otherwise.
type Watcher interface {
	Watch(ctx context.Context, key string) (Subscription, error)
}
