package redisnode

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
)

// NodeLock is what one node says of a lock (InspectOn).
type NodeLock struct {
	// Held is true when the lock key exists; the other fields are then set.
	Held bool
	// Owner is the lock key's value: the owner of the attempt that holds it.
	Owner string
	// TTL is the lock key's PTTL (whole milliseconds, rounded down).
	TTL time.Duration
	// Counter is the token counter; CounterOK is false when it is missing or
	// not a number.
	Counter   distlock.Token
	CounterOK bool
	// Recorded is true when the holder record is Owner's: Token and Value
	// are then the ones it holds (the record of an earlier holder, still
	// expiring, is never reported).
	Recorded bool
	Token    distlock.Token
	Value    string
	// Waiters is the fair queue's live places (InspectQueueOn only), held
	// or free.
	Waiters int
}

// InspectOn reads k's lock in one round trip, with a script that writes
// nothing: the lock's owner and PTTL, the counter, and the holder record
// when it is the current owner's.
func InspectOn(ctx context.Context, c goredis.Scripter, k Keys) (NodeLock, error) {
	return inspectOn(ctx, c, []string{k.Lock, k.Counter, k.Holder})
}

// InspectQueueOn is InspectOn that also counts the live places of k's fair
// queue (WithFairQueue), in the same round trip.
func InspectQueueOn(ctx context.Context, c goredis.Scripter, k Keys) (NodeLock, error) {
	_, deadlines := k.Queue()
	return inspectOn(ctx, c, []string{k.Lock, k.Counter, k.Holder, deadlines})
}

func inspectOn(ctx context.Context, c goredis.Scripter, keys []string) (NodeLock, error) {
	v, err := inspectScript.Run(ctx, c, keys).Slice()
	if err != nil {
		return NodeLock{}, fmt.Errorf("inspect script: %w", err)
	}
	nl, ok := parseInspect(v, len(keys) == 4)
	if !ok {
		return NodeLock{}, fmt.Errorf("inspect script: unexpected reply %q", v)
	}
	return nl, nil
}

// parseInspect reads the inspect script's reply: {0} for a free key, else
// {1, owner, pttl, counter} and, when the holder record is the owner's,
// its token and value; with the queue, the waiter count comes last (and
// the record's two places are nil when it is not the owner's).
func parseInspect(v []any, queue bool) (NodeLock, bool) {
	if len(v) == 0 {
		return NodeLock{}, false
	}
	if held, ok := v[0].(int64); !ok || held == 0 {
		return parseFree(v, ok, queue)
	}
	waiters := 0
	if queue {
		n, ok := v[len(v)-1].(int64)
		if len(v) != 7 || !ok {
			return NodeLock{}, false
		}
		waiters = int(n)
		if v[4] == nil && v[5] == nil {
			v = v[:4] // no record of the owner
		} else {
			v = v[:6]
		}
	}
	if len(v) != 4 && len(v) != 6 {
		return NodeLock{}, false
	}
	nl, ok := parseHeld(v)
	nl.Waiters = waiters
	return nl, ok
}

// parseFree reads the reply for a free key; flagOK is whether its first
// element was an integer.
func parseFree(v []any, flagOK, queue bool) (NodeLock, bool) {
	switch {
	case flagOK && !queue && len(v) == 1:
		return NodeLock{}, true
	case flagOK && queue && len(v) == 2:
		if n, ok := v[1].(int64); ok {
			return NodeLock{Waiters: int(n)}, true
		}
	}
	return NodeLock{}, false
}

// parseHeld reads the reply for a held key, without the queue's count.
func parseHeld(v []any) (NodeLock, bool) {
	owner, ok1 := v[1].(string)
	pttl, ok2 := v[2].(int64)
	if !ok1 || !ok2 {
		return NodeLock{}, false
	}
	nl := NodeLock{Held: true, Owner: owner, TTL: time.Duration(max(pttl, 0)) * time.Millisecond}
	if s, ok := v[3].(string); ok {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			nl.Counter, nl.CounterOK = distlock.Token(n), true
		}
	}
	if len(v) == 6 {
		tok, ok1 := v[4].(string)
		value, ok2 := v[5].(string)
		n, err := strconv.ParseInt(tok, 10, 64)
		if !ok1 || !ok2 || err != nil {
			return NodeLock{}, false
		}
		nl.Recorded, nl.Token, nl.Value = true, distlock.Token(n), value
	}
	return nl, true
}
