package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// counterAt reads the token counter on server s itself (a replica answers
// reads).
func counterAt(ctx context.Context, t *testing.T, s *testserver.Server, counter string) int64 {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	n, err := c.Get(ctx, counter).Int64()
	if err != nil {
		t.Fatalf("GET %s on %s: %v", counter, s.Addr(), err)
	}
	return n
}

// The rule of TestFailoverToLaggingReplica, with Redis Sentinel opened by
// URL (master_name, the Sentinels as host and addr parameters): a Sentinel
// failover to a replica that missed the latest grants keeps tokens
// increasing, and the fence refuses the deposed holder.
func TestSentinelFailoverToLaggingReplica(t *testing.T) {
	rs := testserver.NewRedisSentinel(t)
	pg := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := rs.SentinelAddrs()
	raw := "redis://" + s[0] + "/?master_name=" + rs.Name + "&addr=" + s[1] + "&addr=" + s[2]
	open := func() distlock.Locker {
		t.Helper()
		l, err := distlock.Open(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}

	const key = "sentinel"
	keys := redisnode.KeysFor(redis.DefaultPrefix, key)
	a := open()
	grant := func(n int) { t.Helper(); grantAndRelease(t, a, key, n) }
	// Grants the replica takes, so that it has a counter to lag with.
	grant(5)
	mc := goredis.NewClient(&goredis.Options{Addr: rs.Master.Addr(), ContextTimeoutEnabled: true})
	defer mc.Close()
	if n, err := mc.Wait(ctx, 1, 30*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica to take the first grants: %d replicas, %v", n, err)
	}
	synced := counterAt(ctx, t, rs.Master, keys.Counter)
	if got := counterAt(ctx, t, rs.Replica, keys.Counter); got != synced {
		t.Fatalf("the replica acknowledged the first grants, but its counter is %d, not %d", got, synced)
	}
	if err := rs.CutOff(ctx); err != nil {
		t.Fatal(err)
	}
	grant(5)
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fa := la.Fence()
	if lag := counterAt(ctx, t, rs.Replica, keys.Counter); lag != synced || lag >= int64(fa.Token) {
		t.Fatalf("the replica's counter is %d, want %d (from before the cut) and below A's token %d", lag, synced, fa.Token)
	}

	if err := rs.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	// B asks the Sentinels for the master: the promoted replica, which
	// never saw A's lock.
	b := open()
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	lb, err := b.Acquire(bctx, key)
	bcancel()
	if err != nil {
		t.Fatal(err)
	}
	fb := lb.Fence()
	t.Logf("A holds token %d from the old master; B got %d from the promoted replica (its counter was %d)", fa.Token, fb.Token, synced)
	if fb.Token <= fa.Token {
		t.Errorf("token went backwards across the failover: B's %d is not above A's %d", fb.Token, fa.Token)
	}
	checkFence(ctx, t, pg, fa, fb)
}
