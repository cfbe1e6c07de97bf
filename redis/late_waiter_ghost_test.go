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
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// A waiting Acquire whose first attempt is held up in the network ends by
// ctx; the give-back of that attempt is held up too and lands after the
// attempt's late copy, which found the lock held and queued the waiter.
// The Acquire is over, so that place must go (the waiter leaves once the
// give-back has settled): else Inspect counts it, and at the release the
// hand-off goes to the ghost, and the real waiter behind it waits for the
// ghost's window to lapse.
func TestLateAttemptOfEndedWaitLeavesNoPlace(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	px := testutil.NewDelayProxy(t, srv.Addr(), lateDelay)
	c := goredis.NewClient(&goredis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	a, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	loadScripts(t, a, "ghost-warm")
	const key = "ghostq"
	holder := newLocker(t, srv.Addr())
	ls, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	px.HoldNext(2, []byte(key+"}")) // the attempt, then its give-back
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = a.Acquire(actx, key, distlock.WithTTL(time.Minute))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with its attempt held up: %v", err)
	}
	time.Sleep(lateDelay + 800*time.Millisecond) // both copies landed
	admin := newClient(t, srv.Addr())
	waiters, deadlines := redisnode.KeysFor(redis.DefaultPrefix, key).Queue()
	ghost := admin.ZRangeWithScores(ctx, deadlines, 0, -1).Val()
	h, _ := holder.Inspect(ctx, key)
	// What the ghost costs the next waiter.
	waited := grantedAfterRelease(t, srv, ls, key, admin.ZCard(ctx, waiters).Val()+1, redis.DefaultFairWindow, 10*time.Second)
	t.Logf("next waiter granted %v after the release (window %v)", waited, redis.DefaultFairWindow)
	if len(ghost) > 0 {
		t.Fatalf("an Acquire that ended (ctx) left a place in the queue through its attempt's late copy: %v (deadline in %v), Inspect Waiters=%d; the next waiter was granted %v after the release instead of at once",
			ghost[0].Member, time.Until(time.UnixMilli(int64(ghost[0].Score))).Round(time.Second), h.Waiters, waited)
	}
}
