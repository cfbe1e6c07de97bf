package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

// Inspect implements driver.Backend.Inspect: one read-only script on the server
// that owns the key (its master, on a Cluster: every key of a lock shares
// one slot) reads the lock, its PTTL, the token counter and the holder
// record. The record counts only when its owner is the lock's, so a value
// left by an earlier holder is never reported for the current one.
//
// The token is the holder record's when there is one (the lock was taken
// with a value), else the counter's: the acquire script sets the lock and
// advances the counter together, and nothing advances the counter while
// the lock exists (an acquire finds it held; a resent acquire of the same
// attempt only reads the counter back), so while a lock is held its
// counter is its holder's token.
//
// With a fair queue, Waiters counts the queue's places that have not
// lapsed, in the same script: Acquire calls waiting their turn, and for
// up to their place's deadline those that went away without leaving (a
// crashed process; one that gave up leaves at once). Without one, waiters
// are not queued on the server and Waiters is -1.
func (b *backend) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	inspect, waiters := redisnode.InspectOn, -1
	if b.fair > 0 {
		inspect = redisnode.InspectQueueOn
	}
	nl, err := inspect(ctx, b.client, redisnode.KeysFor(b.prefix, key))
	if err != nil {
		return driver.Holder{}, b.classify(err)
	}
	if b.fair > 0 {
		waiters = nl.Waiters
	}
	if !nl.Held {
		return driver.Holder{Waiters: waiters}, nil
	}
	h := driver.Holder{Held: true, Value: nl.Value, Waiters: waiters,
		// PTTL is rounded down to the millisecond: a lock in its last one
		// is still held.
		TTL: max(nl.TTL, time.Millisecond)}
	switch {
	case nl.Recorded:
		h.Token = int64(nl.Token)
	case nl.CounterOK:
		h.Token = int64(nl.Counter)
	default:
		return driver.Holder{}, fmt.Errorf("redis: %q is held, but its token counter is missing or not a number (evicted?)", key)
	}
	return h, nil
}
