package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// Per-entity keys, each locked once: everything they leave behind expires,
// the token counters last (TTL + CounterLinger past their lock), the
// tombstones MaxLate. So the key space is bounded by the keys locked in the
// last TTL + an hour.
func TestKeysLockedOnceLeaveOnlyExpiringKeys(t *testing.T) {
	srv := testserver.Redis(t)
	l := newLocker(t, srv.Addr())
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	const keys, ttl = 10000, 10 * time.Second
	testutil.LockEachOnce(t, l, keys, ttl)
	n, persistent, longest := testutil.RedisKeysLeft(t, admin)
	t.Logf("%d keys locked once: %d keys left, %d without expiry, the longest to expire in %v", keys, n, persistent, longest.Round(time.Second))
	if persistent > 0 {
		t.Fatalf("%d keys never expire", persistent)
	}
	if longest > ttl+redisnode.CounterLinger {
		t.Fatalf("a key outlives its lock by %v, more than TTL + %v", longest, redisnode.CounterLinger)
	}
	if n > 2*keys {
		t.Fatalf("%d keys left for %d locked once: want a counter and a tombstone each at most", n, keys)
	}
}

// A key locked again after its token counter expired (an hour after its
// last lock) gets a larger token than before: the clock in µs has passed
// the counter.
func TestTokenOrderAcrossCounterExpiry(t *testing.T) {
	srv := testserver.Redis(t)
	l := newLocker(t, srv.Addr())
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	const key = "expiring-counter"
	k := redisnode.KeysFor(redis.DefaultPrefix, key)
	var last distlock.Token
	for round := range 3 {
		ls, err := l.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if ls.Token() <= last {
			t.Fatalf("round %d: token %d not above %d after the counter expired", round, ls.Token(), last)
		}
		last = ls.Token()
		if d := admin.PTTL(ctx, k.Counter).Val(); d <= 0 || d > distlock.DefaultTTL+redisnode.CounterLinger {
			t.Fatalf("counter expires in %v, want within TTL + %v", d, redisnode.CounterLinger)
		}
		if err := ls.Release(context.WithoutCancel(ctx)); err != nil {
			t.Fatal(err)
		}
		// The counter expires, as it does an hour after the last lock.
		if err := admin.PExpire(ctx, k.Counter, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		if admin.Exists(ctx, k.Counter).Val() != 0 {
			t.Fatal("the counter did not expire")
		}
	}
}
