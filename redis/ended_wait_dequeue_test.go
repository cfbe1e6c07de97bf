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

// proxiedFair is a fair Locker whose client reaches srv through a
// DelayProxy (delay lateDelay).
func proxiedFair(t *testing.T, srv *testserver.Server) (distlock.Locker, *testutil.DelayProxy) {
	t.Helper()
	px := testutil.NewDelayProxy(t, srv.Addr(), lateDelay)
	c := goredis.NewClient(&goredis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	l, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, px
}

// queueMembers is key's fair queue, oldest first.
func queueMembers(t *testing.T, admin *goredis.Client, key string) []string {
	waiters, _ := redisnode.KeysFor(redis.DefaultPrefix, key).Queue()
	return admin.ZRange(t.Context(), waiters, 0, -1).Val()
}

// The dequeue that follows the give-back of an ended wait's last attempt
// names that wait's waiter only: the same Locker's next waiting Acquire of
// the key, queued meanwhile, keeps its place and is granted at the release.
func TestEndedWaitDequeueKeepsNextAcquirePlace(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	a, px := proxiedFair(t, srv)
	loadScripts(t, a, "next-warm")
	const key = "nextq"
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
	got := make(chan error, 1)
	go func() {
		nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		ls, err := a.Acquire(nctx, key, distlock.WithTTL(time.Minute))
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	queued(t, srv, key, 1)
	time.Sleep(lateDelay + 800*time.Millisecond) // the late copy and the give-back landed
	admin := newClient(t, srv.Addr())
	if q := queueMembers(t, admin, key); len(q) != 1 {
		t.Fatalf("queue after the ended wait's clean-up: %v; want the next Acquire's place only", q)
	}
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the Locker's next Acquire: %v", err)
		}
		if d := time.Since(released); d > time.Second {
			t.Fatalf("the Locker's next Acquire was granted %v after the release; its place was taken", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Locker's next Acquire lost its place: not granted within 10s of the release")
	}
}

// Close while an ended wait's give-back (and the dequeue after it) is held
// up ends the clean-up and leaves no goroutine of the library behind.
func TestCloseDuringEndedWaitCleanUp(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	const key = "closeq"
	holder := newLocker(t, srv.Addr())
	if _, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	base, _ := testutil.Goroutines(libraryPackages...)
	a, px := proxiedFair(t, srv)
	loadScripts(t, a, "close-warm")
	px.HoldNext(2, []byte(key+"}"))
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := a.Acquire(actx, key, distlock.WithTTL(time.Minute))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with its attempt held up: %v", err)
	}
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// Close ends the clean-up, but a call already on the wire ends with its
	// reply (go-redis does not break off a read when its context is
	// cancelled): on a loaded machine Close can meet the give-back in
	// flight and wait for its held-up reply, lateDelay.
	if d := time.Since(start); d > lateDelay+time.Second {
		t.Fatalf("Close took %v with a give-back held up; want it interrupted", d)
	}
	testutil.CheckNoGoroutines(t, base, libraryPackages...)
}

// libraryPackages names the library's code in goroutine stacks, not the
// test's own proxy and server (internal/testutil, internal/testserver).
var libraryPackages = []string{
	"github.com/distlock/distlock.",
	"github.com/distlock/distlock/redis.",
	"github.com/distlock/distlock/internal/redisnode.",
}
