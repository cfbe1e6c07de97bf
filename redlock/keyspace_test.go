package redlock_test

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

// Per-entity keys, each locked once on a Redlock set: on every node all
// they leave behind expires, the counters last (TTL + CounterLinger past
// their lock: phase 2 and a refresh's take-back raise them with an expiry
// too), the tombstones MaxLate.
func TestKeysLockedOnceLeaveOnlyExpiringKeys(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	l := newLocker(t, srvs)
	ctx := t.Context()
	const keys, ttl = 2000, 10 * time.Second
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
	for i, s := range srvs {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		n, persistent := 0, 0
		var longest time.Duration
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
		_ = c.Close()
		t.Logf("node %d: %d keys left, %d without expiry, the longest to expire in %v", i, n, persistent, longest.Round(time.Second))
		if persistent > 0 || longest > ttl+redisnode.CounterLinger {
			t.Fatalf("node %d: %d keys never expire, the longest lasts %v (want at most TTL + %v)", i, persistent, longest, redisnode.CounterLinger)
		}
	}
}
