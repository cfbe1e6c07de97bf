package redis_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// When the queue's head leaves (its Acquire ended) while the lock is free,
// dequeue.lua's notice on the next waiter's own channel wakes it at once,
// not at its next look a window later (a 5s window makes the difference
// plain).
func TestDequeuedHeadWakesNextWaiter(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	const window = 5 * time.Second
	admin := newClient(t, srv.Addr())
	k := redisnode.KeysFor(redis.DefaultPrefix, "deq")
	holder := newLocker(t, srv.Addr(), redis.WithFairQueue(window))
	ls, err := holder.TryAcquire(ctx, "deq", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The head: a waiter of another process, queued by its own attempt.
	if r, err := rednodeAcquireGhost(ctx, admin, k, window); err != nil || r.Acquired {
		t.Fatalf("ghost's attempt on a held lock: %+v, %v", r, err)
	}
	l := newLocker(t, srv.Addr(), redis.WithFairQueue(window))
	got := make(chan time.Time, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if _, err := l.Acquire(actx, "deq", distlock.WithTTL(time.Minute)); err != nil {
			t.Errorf("second waiter: %v", err)
		}
		got <- time.Now()
	}()
	queued(t, srv, "deq", 2)
	time.Sleep(200 * time.Millisecond)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the head's notice is unheard
	left := time.Now()
	if ok, err := redisnode.DequeueOn(ctx, admin, k, "ghost"); err != nil || !ok {
		t.Fatalf("dequeue of the head: %v, %v", ok, err)
	}
	select {
	case at := <-got:
		if d := at.Sub(left); d > time.Second {
			t.Fatalf("next waiter granted %v after the head left a free lock; want at once (window %v)", d, window)
		} else {
			t.Logf("next waiter granted %v after the head left", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("next waiter not granted")
	}
}

func rednodeAcquireGhost(ctx context.Context, c redisnode.Doer, k redisnode.Keys, window time.Duration) (redisnode.AcquireResult, error) {
	return redisnode.AcquireFairOn(ctx, c, k, "ghost-attempt", time.Minute, "", "ghost", window)
}

// Waiters keep their places while the lock is held far longer than the
// window and than their fallback poll (the head looks again every 5s, the
// others every window): the grants after the release follow the queue.
func TestFairQueueOrderAfterLongHold(t *testing.T) {
	order := grantOrder(t, 0, 4, nil, func() { time.Sleep(7 * time.Second) })
	if !inOrder(order, 4) {
		t.Fatalf("after a 7s hold, grants in order %v, want 0..3", order)
	}
}

// A late copy of a queued waiter's refused attempt, landing after the
// waiter left the queue, neither queues the waiter again nor (once the
// lock is free) takes the lock for it.
func TestLateFairAttemptAfterDequeueQueuesNothing(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	k := redisnode.KeysFor(redis.DefaultPrefix, "late")
	waiters, deadlines := k.Queue()
	holder := newLocker(t, srv.Addr())
	ls, err := holder.TryAcquire(ctx, "late", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	w := redis.DefaultFairWindow
	attempt := func() redisnode.AcquireResult {
		r, err := redisnode.AcquireFairOn(ctx, admin, k, "o1", time.Minute, "", "w1", w)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := attempt(); r.Acquired {
		t.Fatal("attempt on a held lock acquired")
	}
	if ok, err := redisnode.DequeueOn(ctx, admin, k, "w1"); err != nil || !ok {
		t.Fatalf("dequeue: %v, %v", ok, err)
	}
	if r := attempt(); r.Acquired {
		t.Fatal("late copy on a held lock acquired")
	}
	if n := admin.ZCard(ctx, waiters).Val() + admin.ZCard(ctx, deadlines).Val(); n != 0 {
		t.Fatalf("a late copy of a refused attempt queued its waiter again after it left (%d entries)", n)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := attempt(); r.Acquired {
		t.Fatalf("a late copy of a refused attempt took the free lock for a waiter that left (token %d)", r.Token)
	}
	if admin.Exists(ctx, k.Lock).Val() != 0 {
		t.Fatal("lock set by a late copy")
	}
}

// A waiter's Acquire ends by ctx while the server is paused (SIGSTOP): it
// returns about at its deadline, and once the server is back Close leaves
// no goroutine behind and the queue empty.
func TestFairWaiterCtxWhileServerPaused(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	holder := newLocker(t, srv.Addr())
	if _, err := holder.TryAcquire(ctx, "paused", distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	l := newLocker(t, srv.Addr())
	errs := make(chan error, 1)
	const wait = 1500 * time.Millisecond
	var start time.Time
	go func() {
		actx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		start = time.Now()
		_, err := l.Acquire(actx, "paused", distlock.WithTTL(time.Minute))
		errs <- err
	}()
	queued(t, srv, "paused", 1)
	time.Sleep(100 * time.Millisecond)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-errs:
	case <-time.After(wait + 2*time.Second):
		_ = srv.Resume()
		t.Fatalf("Acquire with a %v ctx still waiting %v later on a paused server", wait, wait+2*time.Second)
	}
	took := time.Since(start)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("Acquire on a held key succeeded")
	}
	t.Logf("Acquire returned after %v: %v", took, err)
	if took > wait+500*time.Millisecond {
		t.Errorf("Acquire with a %v ctx returned after %v on a paused server", wait, took)
	}
	queued(t, srv, "paused", 0) // its leaving lands once the server is back
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before the Locker", n, before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A restart without persistence in the middle of a queue strands nobody:
// both waiters get the lock soon after it (the queue and lock are gone, so
// their order is not kept: the documented loss of a restart).
func TestFairQueueServerRestart(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	holder := newLocker(t, srv.Addr())
	if _, err := holder.TryAcquire(ctx, "rs", distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 2)
	for i := range 2 {
		l := newLocker(t, srv.Addr())
		go func() {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			w, err := l.Acquire(actx, "rs", distlock.WithTTL(time.Minute))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			time.Sleep(10 * time.Millisecond)
			_ = w.Release(ctx)
		}()
		queued(t, srv, "rs", int64(i+1))
	}
	time.Sleep(200 * time.Millisecond)
	restarted := time.Now()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		at := <-got
		if at.IsZero() {
			t.FailNow()
		}
		t.Logf("granted %v after the restart began", at.Sub(restarted))
		if d := at.Sub(restarted); d > 8*time.Second {
			t.Errorf("waiter granted %v after a restart", d)
		}
	}
}

// A release that lands while the head's subscription to its own channel is
// not active yet (the release races its SUBSCRIBE) is caught by the retry
// after the subscription becomes active: over many tries, no head waits
// for its fallback poll (min(holder PTTL, 5s)).
func TestFairHeadReleaseRacesItsSubscribe(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	waiters, _ := redisnode.KeysFor(redis.DefaultPrefix, "race").Queue()
	holder := newLocker(t, srv.Addr())
	var worst time.Duration
	for i := range 40 {
		ls, err := holder.TryAcquire(ctx, "race", distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l := newLocker(t, srv.Addr())
		got := make(chan error, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			w, err := l.Acquire(actx, "race", distlock.WithTTL(30*time.Second))
			if err == nil {
				err = w.Release(ctx)
			}
			got <- err
		}()
		for admin.ZCard(ctx, waiters).Val() == 0 {
			time.Sleep(50 * time.Microsecond)
		}
		time.Sleep(time.Duration(i%8) * 250 * time.Microsecond)
		released := time.Now()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		worst = max(worst, time.Since(released))
		_ = l.Close()
	}
	t.Logf("longest grant after a release racing the head's subscribe: %v", worst)
	if worst > time.Second {
		t.Fatalf("a head whose subscribe raced the release waited %v", worst)
	}
}

// Each waiter subscribes to a channel of its own; once the waits are over
// (granted, or ended by ctx) none of those channels stays subscribed on
// the server, though the Locker stays open.
func TestFairWaiterChannelsUnsubscribed(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	holder := newLocker(t, srv.Addr())
	l := newLocker(t, srv.Addr())
	for i := range 10 {
		ls, err := holder.TryAcquire(ctx, "chans", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 2)
		for j := range 2 {
			go func() {
				d := 10 * time.Second
				if j == 1 {
					d = 300 * time.Millisecond // gives up
				}
				actx, cancel := context.WithTimeout(ctx, d)
				defer cancel()
				w, err := l.Acquire(actx, "chans", distlock.WithTTL(time.Minute))
				if err == nil {
					err = w.Release(ctx)
				} else if j == 1 {
					err = nil
				}
				got <- err
			}()
		}
		queued(t, srv, "chans", 2)
		time.Sleep(400 * time.Millisecond)
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-got; err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
	}
	pattern := redisnode.KeysFor(redis.DefaultPrefix, "chans").Channel + ":*"
	var left []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if left = admin.PubSubChannels(ctx, pattern).Val(); len(left) == 0 {
			return
		}
	}
	t.Fatalf("%d per-waiter channels still subscribed after every wait ended: %v", len(left), left)
}
