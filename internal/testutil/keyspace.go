package testutil

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
)

// LockEachOnce acquires, refreshes and releases keys distinct keys once
// each, with a value (so holder records are written too): what per-entity
// locks leave behind on a server.
func LockEachOnce(t testing.TB, l distlock.Locker, keys int, ttl time.Duration) {
	t.Helper()
	ctx := t.Context()
	for i := range keys {
		ls, err := l.TryAcquire(ctx, fmt.Sprintf("order/%d", i), distlock.WithTTL(ttl), distlock.WithValue("v"))
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// RedisKeysLeft counts the keys on a server, and those without an expiry,
// and finds the longest time to live among the others.
func RedisKeysLeft(t testing.TB, c *goredis.Client) (n, persistent int, longest time.Duration) {
	t.Helper()
	ctx := t.Context()
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
		switch d := c.PTTL(ctx, iter.Val()).Val(); {
		case d == -1: // -2: expired since the scan
			persistent++
		case d > longest:
			longest = d
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n, persistent, longest
}
