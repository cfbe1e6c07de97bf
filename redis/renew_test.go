package redis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// Many auto-renewing leases are kept by the Locker's one renewer, with their
// refreshes pipelined: no goroutine per lease, and far fewer round trips than
// refreshes. TTL 900ms: every lease is refreshed about every 300ms.
func TestManyRenewingLeasesBatched(t *testing.T) {
	srv := testserver.Redis(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	calls := &testutil.RedisCalls{}
	c.AddHook(calls)
	l, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	const n = 300
	base, _ := testutil.Goroutines("github.com/distlock/distlock")
	leases := renewingLeases(t, l, "many-", n)
	if g, dump := testutil.Goroutines("github.com/distlock/distlock"); g > base+2 {
		t.Errorf("%d goroutines of the library for %d renewing leases, %d before (want at most the renewer and one call more):\n%s",
			g, n, base, dump)
	}
	before := commandCalls(t, admin)
	singles, pipelines := calls.Singles.Load(), calls.Pipelines.Load()
	time.Sleep(2 * time.Second) // about six intervals; nothing but renewals
	after := commandCalls(t, admin)
	refreshes := int64(after["pexpire"] - before["pexpire"]) // one PEXPIRE per refresh of a lock without a value
	scripts := int64(scriptCalls(after) - scriptCalls(before))
	singles, pipelines = calls.Singles.Load()-singles, calls.Pipelines.Load()-pipelines
	for i, ls := range leases {
		if err := ls.Err(); err != nil {
			t.Fatalf("lease %d ended while renewing: %v", i, err)
		}
	}
	if min := int64(n * 4); refreshes < min {
		t.Errorf("%d refresh scripts in 2s for %d leases at a 300ms interval, want at least %d", refreshes, n, min)
	}
	// One round trip per lease and interval would be about 2000; batched,
	// the leases due together share a pipeline.
	t.Logf("%d refreshes by %d script calls in %d pipelines and %d single calls", refreshes, scripts, pipelines, singles)
	if rt := singles + pipelines; rt > refreshes/10 {
		t.Errorf("%d round trips for %d refreshes: not batched", rt, refreshes)
	}
	for _, ls := range leases {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// WithDrift(0, 0) is no margin at all, not the defaults.
func TestWithDriftZeroMeansNoMargin(t *testing.T) {
	srv := testserver.Redis(t)
	l := newLocker(t, srv.Addr())
	const ttl = 10 * time.Second
	start := time.Now()
	ls, err := l.TryAcquire(t.Context(), "drift0", distlock.WithTTL(ttl), distlock.WithDrift(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(t.Context())
	if got := ls.Expires().Sub(start); got < ttl-20*time.Millisecond {
		t.Errorf("WithDrift(0, 0): Expires is start+%v, want about start+%v", got, ttl)
	}
}

type slowKey struct{}

// slowHook delays, once, a command whose context carries slowKey.
type slowHook struct {
	d    time.Duration
	once *sync.Once
}

func (h slowHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h slowHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if ctx.Value(slowKey{}) != nil {
			h.once.Do(func() { time.Sleep(h.d) })
		}
		return next(ctx, cmd)
	}
}
func (h slowHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// A renewal that falls due while Refresh(WithTTL(x)) is in flight must not
// send the old TTL after it (it read the TTL before waiting its turn).
func TestRenewalDoesNotUndoRefreshTTL(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	c.AddHook(slowHook{d: 1500 * time.Millisecond, once: new(sync.Once)})
	l, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	ls, err := l.TryAcquire(ctx, "refresh-ttl", distlock.WithTTL(3*time.Second), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	time.Sleep(100 * time.Millisecond)
	// In flight from 0.1s to 1.6s; the renewal falls due at about 1s.
	if err := ls.Refresh(context.WithValue(ctx, slowKey{}, 1), distlock.WithTTL(2500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := ls.TTL(); got != 2500*time.Millisecond {
		t.Errorf("after Refresh(WithTTL(2.5s)) returned nil, the lease's TTL is %v", got)
	}
}

// renewingLeases takes n auto-renewing leases (TTL 900 ms, so refreshed
// about every 300 ms) on keys prefix0, prefix1, ….
func renewingLeases(t *testing.T, l distlock.Locker, prefix string, n int) []*distlock.Lease {
	t.Helper()
	leases := make([]*distlock.Lease, n)
	for i := range leases {
		ls, err := l.TryAcquire(t.Context(), fmt.Sprint(prefix, i), distlock.WithTTL(900*time.Millisecond), distlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = ls
	}
	return leases
}
