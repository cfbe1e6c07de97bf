package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

func goredisZ(score float64, member string) goredis.Z { return goredis.Z{Score: score, Member: member} }

// queued waits until key's fair queue holds n waiters.
func queued(t *testing.T, srv *testserver.Server, key string, n int64) {
	t.Helper()
	admin := newClient(t, srv.Addr())
	waiters, _ := redisnode.KeysFor(redis.DefaultPrefix, key).Queue()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if got := admin.ZCard(context.Background(), waiters).Val(); got == n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("queue of %q: %d waiters, want %d", key, got, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// grantOrder has a holder take "job", queues n waiters behind it one by
// one (each a Locker of its own, with window and the options opts(i)
// gives), runs between (if not nil) while they wait, releases, and
// returns the order the waiters were granted the lock in.
func grantOrder(t *testing.T, window time.Duration, n int, opts func(i int) []distlock.CallOption, between func()) []int {
	t.Helper()
	srv := testserver.Redis(t)
	ctx := t.Context()
	holder := newLocker(t, srv.Addr(), redis.WithFairQueue(window))
	ls, err := holder.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		l := newLocker(t, srv.Addr(), redis.WithFairQueue(window))
		o := []distlock.CallOption{distlock.WithTTL(time.Minute)}
		if opts != nil {
			o = append(o, opts(i)...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := l.Acquire(ctx, "job", o...)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			_ = w.Release(ctx)
		}()
		queued(t, srv, "job", int64(i+1))
	}
	if between != nil {
		between()
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	return order
}

// inOrder reports whether order is 0, 1, …, n-1.
func inOrder(order []int, n int) bool {
	if len(order) != n {
		return false
	}
	for i, w := range order {
		if w != i {
			return false
		}
	}
	return true
}

// Waiters, each a Locker of its own, get the lock in the order they first
// found it held. (Racing on every release, five waiters come out in this
// order about one time in 120.)
func TestFairQueueOrder(t *testing.T) {
	if order := grantOrder(t, 0, 5, nil, nil); !inOrder(order, 5) {
		t.Fatalf("grants in order %v, want 0..4", order)
	}
}

// grantedAfterRelease starts a waiting Acquire of key on a Locker of its
// own (with window), waits until key's queue holds n waiters (it among
// them), releases ls, and returns how long after the release the waiter
// was granted the lock (failing after limit).
func grantedAfterRelease(t *testing.T, srv *testserver.Server, ls *distlock.Lease, key string, n int64, window, limit time.Duration) time.Duration {
	t.Helper()
	ctx := t.Context()
	l := newLocker(t, srv.Addr(), redis.WithFairQueue(window))
	got := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, key, distlock.WithTTL(time.Minute))
		got <- err
	}()
	queued(t, srv, key, n)
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		return time.Since(released)
	case <-time.After(limit):
		t.Fatalf("the waiter behind %d vanished one(s) was not granted within %v of the release (window %v)", n-1, limit, window)
	}
	return 0
}

// A waiter that vanished (its process died: a place nobody comes back to)
// holds the next one up for about the hand-off window after a release, not
// for the time it was told to wait.
func TestFairQueueVanishedWaiter(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	const window = 100 * time.Millisecond
	holder := newLocker(t, srv.Addr(), redis.WithFairQueue(window))
	ls, err := holder.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	admin := newClient(t, srv.Addr())
	waiters, deadlines := redisnode.KeysFor(redis.DefaultPrefix, "job").Queue()
	// The ghost came first and was told to wait a minute.
	admin.ZAdd(ctx, waiters, goredisZ(1, "ghost"))
	admin.ZAdd(ctx, deadlines, goredisZ(float64(time.Now().Add(time.Minute).UnixMilli()), "ghost"))
	if h, err := holder.Inspect(ctx, "job"); err != nil || !h.Held {
		t.Fatalf("Inspect: %+v, %v", h, err)
	}
	waited := grantedAfterRelease(t, srv, ls, "job", 2, window, 5*time.Second)
	t.Logf("granted %v after the release (window %v)", waited, window)
}

// A waiting Acquire that gives up leaves the queue, so the next waiter does
// not wait for its place to lapse.
func TestFairQueueCancelledWaiterLeaves(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	holder := newLocker(t, srv.Addr(), redis.WithFairQueue(time.Minute))
	ls, err := holder.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, srv.Addr(), redis.WithFairQueue(time.Minute))
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = l.Acquire(wctx, "job", distlock.WithTTL(time.Minute))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a held key, ctx of 300ms: %v", err)
	}
	queued(t, srv, "job", 0)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A window of a minute: had the place stayed, this would time out.
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := l.Acquire(actx, "job", distlock.WithTTL(time.Minute)); err != nil {
		t.Fatalf("Acquire after the cancelled waiter left: %v", err)
	}
}

// TryAcquire takes a free lock whoever waits (as java.util.concurrent's fair
// locks do); a waiting Acquire keeps its turn behind the queue.
func TestFairQueueTryAcquireBarges(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	l := newLocker(t, srv.Addr(), redis.WithFairQueue(time.Minute))
	admin := newClient(t, srv.Addr())
	waiters, deadlines := redisnode.KeysFor(redis.DefaultPrefix, "job").Queue()
	admin.ZAdd(ctx, waiters, goredisZ(1, "ghost"))
	admin.ZAdd(ctx, deadlines, goredisZ(float64(time.Now().Add(time.Minute).UnixMilli()), "ghost"))
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := l.Acquire(wctx, "job")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a free key behind a queued waiter: %v; want it to wait", err)
	}
	ls, err := l.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire of a free key behind a queued waiter: %v", err)
	}
	_ = ls.Release(ctx)
}

func TestFairQueueURL(t *testing.T) {
	srv := testserver.Redis(t)
	for _, q := range []string{"fair=true", "fair_window=50ms", "fair=true&fair_window=1s", "fair=false"} {
		l, err := distlock.Open(t.Context(), fmt.Sprintf("redis://%s/?%s", srv.Addr(), q))
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		_ = l.Close()
	}
	for _, q := range []string{"fair=maybe", "fair_window=-1s", "fair_window=soon", "fair=false&fair_window=1s"} {
		if l, err := distlock.Open(t.Context(), fmt.Sprintf("redis://%s/?%s", srv.Addr(), q)); !errors.Is(err, distlock.ErrInvalidURL) && !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: %v; want ErrInvalidURL or ErrInvalidOption", q, err)
			if l != nil {
				_ = l.Close()
			}
		}
	}
}

// A grant to a queued waiter comes a notice round trip after the release,
// so a watcher that looked in between saw the key free; the grant's own
// notice tells it of the new holder without waiting for its next poll
// (here a second away).
func TestFairQueueWatcherSeesHandOff(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	holder := newLocker(t, srv.Addr(), redis.WithFairQueue(0))
	ls, err := holder.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	observer := newLocker(t, srv.Addr(), redis.WithFairQueue(0))
	for round := range 5 {
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		changes, err := observer.Watch(wctx, "job", distlock.WithBackoff(time.Second, 2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if h := <-changes; !h.Held || h.Token != ls.Token() {
			t.Fatalf("round %d: first report %+v, want the holder %d", round, h, ls.Token())
		}
		waiter := newLocker(t, srv.Addr(), redis.WithFairQueue(0))
		got := make(chan *distlock.Lease, 1)
		go func() {
			w, err := waiter.Acquire(ctx, "job", distlock.WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		queued(t, srv, "job", 1)
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next := <-got
		if next == nil {
			return
		}
		deadline := time.After(500 * time.Millisecond)
	wait:
		for {
			select {
			case h := <-changes:
				if h.Held && h.Token == next.Token() {
					break wait
				}
			case <-deadline:
				t.Fatalf("round %d: the new holder (token %d) not reported within 500ms of its grant (polls 1s apart)", round, next.Token())
			}
		}
		ls = next
		stop()
	}
}
