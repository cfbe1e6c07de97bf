package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// One give-back call settles an attempt (the tombstone refuses it if it
// lands later), so a burst of them does not fill the give-back slots.
func TestGiveBackAfterBurstOfAbandonedAttempts(t *testing.T) {
	srv := testserver.Redis(t)
	raw, err := redis.NewBackend(newClient(t, srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckGiveBackAfterBurst(t, raw, newLocker(t, srv.Addr()))
}

// A lease whose release could not reach the server ends as lost and is
// given back in the background. While the network is out (here every
// request is held up far past the client's read timeout, as when a dropped
// reply leaves go-redis with only new connections, whose handshake gets no
// answer), each give-back call fails; once it heals, the give-back must
// still land, freeing the key long before the lock's own TTL.
func TestLostLeaseGivenBackAfterNetworkHeals(t *testing.T) {
	srv := testserver.Redis(t)
	px := testutil.NewDelayProxy(t, srv.Addr(), time.Minute)
	a := resendingLocker(t, px.Addr())
	b := newLocker(t, srv.Addr())
	const key = "giveback-after-heal"
	ctx := t.Context()
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	px.Slow.Store(true) // the network is out
	if err := la.Release(ctx); err == nil {
		t.Fatal("Release succeeded with every request held up")
	}
	if !errors.Is(la.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("after a failed release, Err() = %v, want ErrLeaseLost", la.Err())
	}
	time.Sleep(2 * time.Second) // a first give-back call fails meanwhile
	px.Slow.Store(false)        // the network heals
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lb, err := b.Acquire(wctx, key)
	if err != nil {
		t.Fatalf("the key was not freed after the network healed (the lost lease's lock holds for its 20s TTL): %v", err)
	}
	_ = lb.Release(ctx)
}
