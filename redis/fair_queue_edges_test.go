package redis_test

// The fair queue at its edges, on real servers.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// Liveness: two waiters whose process died, queued one
// behind the other while the lock was held, stranded the free lock after
// the release for about the holder's TTL: the release shortens only the
// first waiter's deadline, and the next kept its own (its attempt + PTTL +
// window). Now each is granted about a window at most.
func TestFairQueueTwoVanishedWaiters(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	const window = 100 * time.Millisecond
	holder := newLocker(t, srv.Addr(), redis.WithFairQueue(window))
	ls, err := holder.TryAcquire(ctx, "job", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Two waiting Acquires of a process that then died: real attempts of
	// the acquire script, never followed by another attempt or a Dequeue.
	admin := newClient(t, srv.Addr())
	k := redisnode.KeysFor(redis.DefaultPrefix, "job")
	for _, g := range []string{"ghost1", "ghost2"} {
		r, err := redisnode.AcquireFairOn(ctx, admin, k, g+"-owner", 30*time.Second, "", g, window)
		if err != nil || r.Acquired {
			t.Fatalf("ghost attempt: %+v %v", r, err)
		}
	}
	waited := grantedAfterRelease(t, srv, ls, "job", 3, window, 5*time.Second)
	t.Logf("granted %v after the release", waited)
}

// Liveness, a lock held by nobody for a TTL: a resent attempt
// (go-redis resends a command whose reply was lost) whose first copy took
// the lock must get the lock back (the cur == ARGV[1] path). In fair mode,
// if another waiter had queued in between, the resend was told "held" and
// queued again, and the lock stayed with an owner nobody knew of (no
// give-back runs: ErrNotAcquired is not ambiguous) until its TTL.
func TestFairQueueResentAttempt(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	const window = 100 * time.Millisecond
	admin := newClient(t, srv.Addr())
	k := redisnode.KeysFor(redis.DefaultPrefix, "job")
	// W's attempt takes the free lock; its reply is lost.
	r, err := redisnode.AcquireFairOn(ctx, admin, k, "w-attempt1", time.Minute, "", "w", window)
	if err != nil || !r.Acquired {
		t.Fatalf("first copy: %+v %v", r, err)
	}
	// Meanwhile another waiting Acquire finds it held and queues.
	l := newLocker(t, srv.Addr(), redis.WithFairQueue(window))
	go func() { _, _ = l.Acquire(ctx, "job") }()
	queued(t, srv, "job", 1)
	// The client resends W's attempt.
	r2, err := redisnode.AcquireFairOn(ctx, admin, k, "w-attempt1", time.Minute, "", "w", window)
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Acquired {
		t.Fatalf("resent attempt whose first copy holds the lock (GET %q): %+v, want it acquired as without the queue",
			admin.Get(ctx, k.Lock).Val(), r2)
	}
}

// Lua error: pruning many lapsed places unpacked them all
// into one ZREM; past Lua's C stack limit (about 8,000) the script failed,
// so every waiting Acquire of the key failed until the queue keys expired.
func TestFairQueueManyLapsedPlaces(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	waiters, deadlines := redisnode.KeysFor(redis.DefaultPrefix, "job").Queue()
	past := float64(time.Now().Add(-time.Second).UnixMilli())
	var ws, ds []goredis.Z
	for i := range 10000 {
		m := fmt.Sprintf("dead-%05d", i)
		ws = append(ws, goredis.Z{Score: float64(i), Member: m})
		ds = append(ds, goredis.Z{Score: past, Member: m})
	}
	admin.ZAdd(ctx, waiters, ws...)
	admin.ZAdd(ctx, deadlines, ds...)
	l := newLocker(t, srv.Addr(), redis.WithFairQueue(0))
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ls, err := l.Acquire(actx, "job")
	if err != nil {
		t.Fatalf("Acquire of a free key whose queue holds 10000 lapsed places: %v", err)
	}
	_ = ls.Release(ctx)
}

// waitingBehindProxy makes key held by another Locker and returns a
// Locker (fair or not) whose connection goes through a proxy the test can
// make silent.
func waitingBehindProxy(t *testing.T, srv *testserver.Server, key string, fair bool) (distlock.Locker, *testutil.DelayProxy) {
	t.Helper()
	holder := newLocker(t, srv.Addr())
	if _, err := holder.TryAcquire(t.Context(), key, distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	p := testutil.NewDelayProxy(t, srv.Addr(), time.Minute)
	opts := []distlock.Option{redis.WithFairQueue(0)}
	if !fair {
		opts = []distlock.Option{redis.WithoutFairQueue()}
	}
	return newLocker(t, p.Addr(), opts...), p
}

// Timeouts: a waiting Acquire whose ctx ended while the
// server was out of reach returned only after its Dequeue gave up
// (ReleaseTimeout, 5 s), not when ctx ended, as it does without the queue.
func TestFairQueueAcquireEndsWithCtx(t *testing.T) {
	srv := testserver.Redis(t)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			l, p := waitingBehindProxy(t, srv, fmt.Sprint("job-", fair), fair)
			actx, cancel := context.WithTimeout(t.Context(), 1*time.Second)
			defer cancel()
			go func() { time.Sleep(500 * time.Millisecond); p.Slow.Store(true) }() // the network goes away mid-wait
			start := time.Now()
			_, err := l.Acquire(actx, fmt.Sprint("job-", fair))
			took := time.Since(start)
			if took > 1500*time.Millisecond {
				t.Errorf("Acquire with a 1s ctx returned after %v (%v)", took, err)
			}
			t.Logf("returned after %v: %v", took, err)
		})
	}
}

// Close: Close wakes waiting Acquires with ErrClosed,
// then waits for them; each one's Dequeue ignored Close and held it for up
// to ReleaseTimeout while the server was out of reach.
func TestFairQueueCloseNotHeldByDequeue(t *testing.T) {
	srv := testserver.Redis(t)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			l, p := waitingBehindProxy(t, srv, fmt.Sprint("job-", fair), fair)
			done := make(chan error, 1)
			go func() { _, err := l.Acquire(t.Context(), fmt.Sprint("job-", fair)); done <- err }()
			time.Sleep(500 * time.Millisecond)
			p.Slow.Store(true)
			start := time.Now()
			_ = l.Close()
			took := time.Since(start)
			t.Logf("Close took %v; Acquire: %v", took, <-done)
			if took > time.Second {
				t.Errorf("Close took %v with no lease held", took)
			}
		})
	}
}

// A waiter in the queue without a deadline (the other key evicted or
// edited by hand) counts as lapsed: it neither blocks the queue nor makes
// the script fail.
func TestFairQueueWaiterWithoutDeadline(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	waiters, _ := redisnode.KeysFor(redis.DefaultPrefix, "job").Queue()
	admin.ZAdd(ctx, waiters, goredis.Z{Score: 1, Member: "no-deadline"})
	l := newLocker(t, srv.Addr(), redis.WithFairQueue(time.Minute))
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ls, err := l.Acquire(actx, "job")
	if err != nil {
		t.Fatalf("Acquire of a free key behind a waiter without a deadline: %v", err)
	}
	_ = ls.Release(ctx)
}

// Fairness: a place lapsed a window after the
// wait the waiter was told, but the client comes back later than told (its
// back-off jitter, up to BackoffMin): with WithBackoff(400ms, …) and a
// 100 ms window, a waiter lost its place on every look and was served
// after one that came later.
func TestFairQueueBackoffMinOutlivesWindow(t *testing.T) {
	const window = 100 * time.Millisecond
	order := grantOrder(t, window, 3, func(i int) []distlock.CallOption {
		if i == 1 {
			return []distlock.CallOption{distlock.WithBackoff(400*time.Millisecond, time.Second)}
		}
		return nil
	}, func() { time.Sleep(2 * time.Second) }) // held; waiter 1 looks again every window
	if !inOrder(order, 3) {
		t.Fatalf("grants in order %v, want [0 1 2] (waiter 1 has WithBackoff(400ms, 1s), window %v)", order, window)
	}
}

// A window so short that waiting would be polling is refused.
func TestFairQueueMinWindow(t *testing.T) {
	c := newClient(t, testserver.Redis(t).Addr())
	if _, err := redis.New(c, redis.WithFairQueue(time.Millisecond)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("WithFairQueue(1ms): %v; want ErrInvalidOption", err)
	}
}
