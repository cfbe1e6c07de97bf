package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// fairWaiterBehind starts a waiting Acquire of key on l and returns the
// channel its outcome comes on, and when it was granted.
func fairWaiterBehind(ctx context.Context, l distlock.Locker, key string) <-chan error {
	got := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		ls, err := l.Acquire(actx, key, distlock.WithTTL(time.Minute))
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	return got
}

// waitQueued waits until key's queue, read through admin, holds n waiters.
func waitQueued(t *testing.T, admin goredis.Cmdable, key string, n int64) {
	t.Helper()
	waiters, _ := redisnode.KeysFor(redis.DefaultPrefix, key).Queue()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if got := admin.ZCard(t.Context(), waiters).Val(); got == n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("queue of %q: %d waiters, want %d", key, got, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// racingReleaseWakesHead has racing (WithoutFairQueue) take key, queues a
// waiter of fair behind it, releases, and fails unless the release succeeds
// and the waiter is granted well before its fallback poll.
func racingReleaseWakesHead(t *testing.T, racing, fair distlock.Locker, admin goredis.Cmdable, key string) {
	t.Helper()
	ctx := t.Context()
	ls, err := racing.TryAcquire(ctx, key, distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatalf("racing TryAcquire %q: %v", key, err)
	}
	got := fairWaiterBehind(ctx, fair, key)
	waitQueued(t, admin, key, 1)
	time.Sleep(100 * time.Millisecond) // the waiter is in its Wait
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("racing Release of %q with a fair waiter queued: %v", key, err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("fair waiter of %q: %v", key, err)
		}
		if d := time.Since(released); d > time.Second {
			t.Fatalf("fair head of %q granted %v after the racing release; want well under its fallback poll", d, key)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("fair head of %q not granted within 10s of the racing release", key)
	}
}

// On a Redis Cluster the queue-aware release a racing Locker now runs
// names the queue's keys too: they must share the lock key's slot (else
// CROSSSLOT fails every racing release), whatever the key's braces.
func TestRacingReleaseOnClusterWakesFairHead(t *testing.T) {
	addr := startClusterNode(t)
	admin := newClusterClient(addr)
	t.Cleanup(func() { _ = admin.Close() })
	newCl := func(opts ...distlock.Option) distlock.Locker {
		l, err := redis.New(newClusterClient(addr), append([]distlock.Option{redis.WithCloseClient(true)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	racing, fair := newCl(redis.WithoutFairQueue()), newCl()
	for _, key := range []string{"orders/42", "a}b", "}x", "{", "{x}y"} {
		k := redisnode.KeysFor(redis.DefaultPrefix, key)
		waiters, deadlines := k.Queue()
		slot := admin.ClusterKeySlot(t.Context(), k.Lock).Val()
		for _, name := range []string{waiters, deadlines, k.GoneFor("o"), k.Seq} {
			if s := admin.ClusterKeySlot(t.Context(), name).Val(); s != slot {
				t.Errorf("key %q: %s in slot %d, the lock in %d", key, name, s, slot)
			}
		}
		racingReleaseWakesHead(t, racing, fair, admin, key)
	}
	// The give-back after a WAIT shortfall runs the same script on a
	// connection of its own.
	wr := newCl(redis.WithoutFairQueue(), redis.WithWaitReplicas(1, 50*time.Millisecond))
	if _, err := wr.TryAcquire(t.Context(), "a}b"); !errors.Is(err, redis.ErrNotReplicated) {
		t.Fatalf("WithWaitReplicas on a node without replicas: %v; want ErrNotReplicated", err)
	}
	if n := admin.Exists(t.Context(), redisnode.KeysFor(redis.DefaultPrefix, "a}b").Lock).Val(); n != 0 {
		t.Fatal("the give-back after the WAIT shortfall left the lock set")
	}
}

// Under the documented least-privilege ACL a racing Locker's release, which
// now reads and cuts the fair queue and publishes on the head's channel,
// still succeeds and still wakes the head.
func TestRacingReleaseUnderDocumentedACL(t *testing.T) {
	srv := testserver.Redis(t, testserver.WithRedisACL(
		"user default off",
		"user admin on >admin-pw ~* &* +@all",
		"user app on >app-pw "+testserver.RedisLockACL(redis.DefaultPrefix),
	))
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: "admin", Password: "admin-pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = admin.Close() })
	newApp := func(opts ...distlock.Option) distlock.Locker {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: "app", Password: "app-pw", ContextTimeoutEnabled: true})
		l, err := redis.New(c, append([]distlock.Option{redis.WithCloseClient(true)}, opts...)...)
		if err != nil {
			_ = c.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	racing, fair := newApp(redis.WithoutFairQueue()), newApp()
	racingReleaseWakesHead(t, racing, fair, admin, "acl")
	// And with nobody queued (the ZRANGE of an empty queue).
	ls, err := racing.TryAcquire(t.Context(), "acl-empty")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(t.Context()); err != nil {
		t.Fatalf("racing release under the documented ACL: %v", err)
	}
}
