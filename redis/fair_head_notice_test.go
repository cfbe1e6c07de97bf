package redis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// grant is one waiter's grant: who, and how long after the release.
type grant struct {
	who   int
	after time.Duration
}

// queueTwoFairWaiters starts two waiting Acquires of key on default
// (fair) Lockers, one after the other, and returns a channel that gets
// their grants in the order they happened (each holds the lock 10ms) and
// a func that marks the release instant the latencies count from.
func queueTwoFairWaiters(t *testing.T, srv *testserver.Server, key string) (<-chan grant, func()) {
	t.Helper()
	ctx := t.Context()
	var (
		mu       sync.Mutex
		released time.Time
	)
	since := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Since(released)
	}
	grants := make(chan grant, 2)
	var order sync.Mutex // serialises "granted" with the grant's send
	for i := range 2 {
		l := newLocker(t, srv.Addr()) // the default: a fair queue
		go func() {
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			w, err := l.Acquire(actx, key, distlock.WithTTL(time.Minute))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				grants <- grant{who: -1}
				return
			}
			order.Lock()
			grants <- grant{who: i, after: since()}
			order.Unlock()
			time.Sleep(10 * time.Millisecond)
			_ = w.Release(ctx)
		}()
		queued(t, srv, key, int64(i+1))
	}
	time.Sleep(100 * time.Millisecond) // both are in their Wait by now
	return grants, func() {
		mu.Lock()
		released = time.Now()
		mu.Unlock()
	}
}

// checkHeadFirstAndPrompt fails unless waiter 0 (the queue's head) was
// granted first and within limit of the release.
func checkHeadFirstAndPrompt(t *testing.T, grants <-chan grant, limit time.Duration) {
	t.Helper()
	var got []grant
	for range 2 {
		g := <-grants
		if g.who < 0 {
			t.FailNow()
		}
		got = append(got, g)
	}
	t.Logf("grants (waiter, time after the release): %+v", got)
	if got[0].who != 0 {
		t.Errorf("FIFO broken: waiter 1 (second in the queue) was granted first, %v after the release; the head, waiter 0, only %v after it", got[0].after, got[1].after)
	}
	for _, g := range got {
		if g.who == 0 && g.after > limit {
			t.Errorf("the queue's head was granted %v after the release of a free lock; want within %v (default window %v)", g.after, limit, redis.DefaultFairWindow)
		}
	}
}

// Two fair waiters queue behind a lock held by a Locker WithoutFairQueue
// (mixed settings). Its release must wake the queue's head on the head's
// own channel and cut its place to a window, or the head sleeps until its
// fallback poll while the second waiter, looking again every window, sees
// the lock free, makes the head's place lapse and goes first.
func TestFairHeadWokenByReleaseWithoutFairQueue(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	racing := newLocker(t, srv.Addr(), redis.WithoutFairQueue())
	ls, err := racing.TryAcquire(ctx, "mixed", distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	grants, mark := queueTwoFairWaiters(t, srv, "mixed")
	mark()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	checkHeadFirstAndPrompt(t, grants, time.Second)
}

// A racing waiter (WithoutFairQueue) behind a fair Locker's lock hears the
// fair release on the key's release channel.
func TestRacingWaiterWokenByFairRelease(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	fair := newLocker(t, srv.Addr())
	ls, err := fair.TryAcquire(ctx, "mixed", distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	racing := newLocker(t, srv.Addr(), redis.WithoutFairQueue())
	got := make(chan time.Time, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if _, err := racing.Acquire(actx, "mixed", distlock.WithTTL(time.Minute)); err != nil {
			t.Errorf("racing waiter: %v", err)
		}
		got <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond) // the racing waiter is in its Wait
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d := (<-got).Sub(released); d > time.Second {
		t.Fatalf("racing waiter granted %v after the fair release; want well under its 5s fallback poll", d)
	} else {
		t.Logf("racing waiter granted %v after the fair release", d)
	}
}

// A Locker WithWaitReplicas whose WAIT falls short gives its fresh lock
// back. Waiters that queued while the lock sat in the WAIT must hear that
// give-back as a release: the head at once, and in its order.
func TestFairHeadWokenAfterUnreplicatedGiveBack(t *testing.T) {
	srv := testserver.Redis(t) // no replica: every WAIT for one falls short
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	k := redisnode.KeysFor(redis.DefaultPrefix, "wr")
	l := newLocker(t, srv.Addr(), redis.WithWaitReplicas(1, 600*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(ctx, "wr", distlock.WithTTL(20*time.Second))
		done <- err
	}()
	for admin.Exists(ctx, k.Lock).Val() == 0 {
		time.Sleep(time.Millisecond)
	}
	grants, mark := queueTwoFairWaiters(t, srv, "wr")
	// The give-back follows the WAIT's timeout, before TryAcquire returns,
	// and the head may be granted before that: count from now, before the
	// give-back, and allow for the rest of the WAIT.
	mark()
	err := <-done
	if !errors.Is(err, redis.ErrNotReplicated) {
		t.Fatalf("TryAcquire WithWaitReplicas(1) on a server without replicas: %v; want ErrNotReplicated", err)
	}
	checkHeadFirstAndPrompt(t, grants, 2*time.Second)
}
