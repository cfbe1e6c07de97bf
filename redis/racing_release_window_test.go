package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// slowHeadOrder queues three fair waiters (WithFairQueue(window)) behind
// holder's lock on key: waiter 0, the head, reaches the server through a
// proxy that holds its requests for key up by slow once the lock is
// released; waiter 1 is queued before the release, waiter 2 comes lateBy
// after it. It returns the order they were granted the lock in.
func slowHeadOrder(t *testing.T, srv *testserver.Server, holder distlock.Locker, key string, window, slow, lateBy time.Duration) []int {
	t.Helper()
	ctx := t.Context()
	ls, err := holder.TryAcquire(ctx, key, distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	px := testutil.NewDelayProxy(t, srv.Addr(), slow)
	px.Match = []byte(key + "}")
	c := goredis.NewClient(&goredis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	head, err := redis.New(c, redis.WithCloseClient(true), redis.WithFairQueue(window))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = head.Close() })
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	wait := func(i int, l distlock.Locker) {
		defer wg.Done()
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := l.Acquire(actx, key, distlock.WithTTL(time.Minute))
		if err != nil {
			t.Errorf("waiter %d: %v", i, err)
			return
		}
		mu.Lock()
		order = append(order, i)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		_ = w.Release(ctx)
	}
	wg.Add(3)
	go wait(0, head)
	queued(t, srv, key, 1)
	go wait(1, newLocker(t, srv.Addr(), redis.WithFairQueue(window)))
	queued(t, srv, key, 2)
	time.Sleep(100 * time.Millisecond) // both are in their Wait
	px.Slow.Store(true)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lateBy)
	go wait(2, newLocker(t, srv.Addr(), redis.WithFairQueue(window)))
	wg.Wait()
	return order
}

// A fair queue whose Lockers chose a 5 s window (WithFairQueue) for heads
// that answer slowly keeps its head's place for that window after a
// release by one of them. A release by a racing Locker (WithoutFairQueue)
// on the same key must not shrink it to DefaultFairWindow: a head that
// comes 400 ms after the notice then finds its place lapsed, and is sent
// to the back behind a waiter that came after the release.
func TestRacingReleaseKeepsFairQueueWindow(t *testing.T) {
	const (
		window = 5 * time.Second
		slow   = 400 * time.Millisecond
		lateBy = 300 * time.Millisecond
	)
	t.Run("fair holder", func(t *testing.T) {
		srv := testserver.Redis(t)
		order := slowHeadOrder(t, srv, newLocker(t, srv.Addr(), redis.WithFairQueue(window)), "slowhead", window, slow, lateBy)
		if len(order) == 0 || order[0] != 0 {
			t.Fatalf("grant order %v after a fair release: the slow head lost its place within its %v window", order, window)
		}
	})
	t.Run("racing holder", func(t *testing.T) {
		srv := testserver.Redis(t)
		order := slowHeadOrder(t, srv, newLocker(t, srv.Addr(), redis.WithoutFairQueue()), "slowhead", window, slow, lateBy)
		if len(order) == 0 || order[0] != 0 {
			t.Fatalf("grant order %v after a racing Locker's release: the head of a queue whose Lockers keep a %v window came %v after the notice and lost its place (cut to %v), behind a waiter that came %v after the release",
				order, window, slow, redis.DefaultFairWindow, lateBy)
		}
	})
}
