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

// Guarantees().ClockDependent is true: the server expires a lock by its wall
// clock while the lease counts on the client's. A server clock stepped
// forward by most of the TTL is what the PEXPIRE below does to the lock: it
// frees early, and a second client takes it while the first lease still
// reports held.
func TestServerClockStepFreesLockEarly(t *testing.T) {
	srv := testserver.Redis(t)
	a := newLocker(t, srv.Addr())
	b := newLocker(t, srv.Addr())
	if !a.Guarantees().ClockDependent {
		t.Fatal("Guarantees().ClockDependent is false")
	}
	ctx := t.Context()
	const key = "clock-step"
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	// The server's clock jumps 9.95 s ahead: the lock has 50 ms left.
	if err := admin.PExpire(ctx, redisnode.KeysFor(redis.DefaultPrefix, key).Lock, 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	lb, err := b.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("the lock did not free at the server's clock: %v", err)
	}
	defer lb.Release(context.WithoutCancel(ctx))
	if la.Err() != nil {
		t.Fatalf("the first lease noticed (%v): the claim needs the schedule where it does not", la.Err())
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("tokens out of order across the early expiry: %d then %d", la.Token(), lb.Token())
	}
}
