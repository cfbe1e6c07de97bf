package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// The tests below check "suspects" (nodes whose last call timed out, not
// waited for once the others decide a waiting Acquire's vote) and the
// split pause. None has a contender: a lone caller against another owner's
// lock on a minority (node 2, a crashed client's), which cannot be had
// until it expires, or (the last) against a lease held on a bare majority.

// minorityLock sets another owner's lock on node 2 alone for d.
func minorityLock(t *testing.T, srvs []*testserver.Server, key string, d time.Duration) {
	t.Helper()
	k := redisnode.KeysFor(redis.DefaultPrefix, key)
	if r, err := redisnode.AcquireOn(context.Background(), clients(t, srvs[2:3], false)[0], k, "crashed-client", d, ""); err != nil || !r.Acquired {
		t.Fatalf("node 2: %+v %v", r, err)
	}
}

// stopOrHang stops srv (down) or pauses it (hung) for the rest of the test.
func stopOrHang(t *testing.T, srv *testserver.Server, down bool) {
	t.Helper()
	if down {
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })
}

// scriptCalls counts the scripts a node ran.
func scriptCalls(t *testing.T, c goredis.UniversalClient) int64 {
	s, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				var n int64
				_, _ = fmt.Sscanf(rest, "calls=%d", &n)
				total += n
			}
		}
	}
	return total
}

// TestLoneWaiterDoesNotSpinWithSuspect: node 0 hung or down (a refused
// dial also ends in a timeout, go-redis retrying it). Each attempt of the
// one waiter took node 1, heard "held" from node 2 and, node 0 a suspect,
// failed at once with no pause; its own give-back's release notice woke it
// again at once: ~550 attempts a second, up to 200 goroutines on calls to
// node 0. A split that a suspect could have decided now pauses too.
func TestLoneWaiterDoesNotSpinWithSuspect(t *testing.T) {
	for _, down := range []bool{false, true} {
		t.Run(map[bool]string{false: "hung", true: "down"}[down], func(t *testing.T) {
			srvs := testserver.RedisN(t, 3)
			admin := clients(t, srvs[1:2], false)[0]
			const nt = 200 * time.Millisecond
			l := newLocker(t, srvs, distlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(nt))
			stopOrHang(t, srvs[0], down)
			minorityLock(t, srvs, "k", 3*time.Second)
			before := scriptCalls(t, admin)
			actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := l.Acquire(actx, "k")
			calls := scriptCalls(t, admin) - before
			t.Logf("a 2 s waiting Acquire (%v): %d script calls on node 1 (an acquire and a give-back per attempt)", err, calls)
			if calls > 100 {
				t.Errorf("the lone waiter made ~%d attempts in 2 s: it spins on its own release notices", calls/2)
			}
		})
	}
}

// TestTryAcquireWaitsForRecoveredSuspect: node 0 timed out once, then came
// back. A TryAcquire did not wait for it and failed "held" on node 2's
// minority lock (telling its caller to retry in a minute) though nodes 0
// and 1 were free. Only waiting Acquires skip suspects.
func TestTryAcquireWaitsForRecoveredSuspect(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := context.Background()
	minorityLock(t, srvs, "k", time.Minute)
	const nt = 200 * time.Millisecond
	for i := range 5 {
		l := newLocker(t, srvs, distlock.WithTTL(time.Minute), redlock.WithNodeTimeout(nt))
		if err := srvs[0].Pause(); err != nil {
			t.Fatal(err)
		}
		if ls, err := l.TryAcquire(ctx, "other"); err == nil { // node 0 times out: a suspect
			_ = ls.Release(ctx)
		}
		if err := srvs[0].Resume(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // node 0 answers again
		ls, err := l.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("round %d: %v; nodes 0 and 1 are free and up", i, err)
		}
		_ = ls.Release(ctx)
	}
}

// TestLoneWaiterTakesFreedLockPromptly: node 0 fails at once (out of
// memory: a failure, not a suspect), so each attempt is a split that node
// 0 could have decided, and the pause range doubled each time up to 16
// node timeouts: the waiter took the lock up to 1.9 s after node 2's lock
// expired (node timeout 200 ms). The pause now ends no later than the lock that blocked it.
func TestLoneWaiterTakesFreedLockPromptly(t *testing.T) {
	const nt = 100 * time.Millisecond
	const stale = 2500 * time.Millisecond
	srvs := testserver.RedisN(t, 3)
	ctx := context.Background()
	full := clients(t, srvs[:1], false)[0]
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := full.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l := newLocker(t, srvs, distlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(nt))
	var worst time.Duration
	for round := range 5 { // the old pause missed by less than 2 nt in 1 round of 3
		key := fmt.Sprintf("k%d", round)
		minorityLock(t, srvs, key, stale)
		freed := time.Now().Add(stale)
		actx, cancel := context.WithTimeout(ctx, stale+5*time.Second)
		ls, err := l.Acquire(actx, key)
		cancel()
		lag := time.Since(freed)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: taken %v after the lock was free on nodes 1 and 2", round, lag.Round(time.Millisecond))
		_ = ls.Release(ctx)
		worst = max(worst, lag)
	}
	if worst > 2*nt+100*time.Millisecond {
		t.Errorf("the lone waiter took a free lock up to %v after it was free (node timeout %v, no contenders)", worst.Round(time.Millisecond), nt)
	}
}

// TestLoneWaiterTakesReleasedLockPromptly: a lease held
// on nodes 0 and 1 only (node 2 was down when it was taken, and came back
// empty), node 0 then hung. Each attempt of a lone waiter takes node 2,
// hears "held" from node 1, and node 0 (a suspect) could have decided:
// it pauses. When the split pause's range grew with each split in a row
// (up to 16 node timeouts), the waiter slept through the lease's release
// and took the lock up to 1.3 s after it; the pause is now at most two node
// timeouts. Node 1 is reached through a 2 ms delay so that its "held"
// comes after node 2's yes.
func TestLoneWaiterTakesReleasedLockPromptly(t *testing.T) {
	const nt = 100 * time.Millisecond
	srvs := testserver.RedisN(t, 3)
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2"}
	holder := newLocker(t, srvs, distlock.WithTTL(30*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))
	if err := srvs[2].Stop(); err != nil {
		t.Fatal(err)
	}
	var leases []*distlock.Lease
	for _, k := range keys {
		ls, err := holder.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("holder %s: %v", k, err)
		}
		leases = append(leases, ls)
	}
	time.Sleep(400 * time.Millisecond) // the holder's calls to node 2 are over
	if err := srvs[2].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srvs[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srvs[0].Resume() }()
	var cs []goredis.UniversalClient
	for i, s := range srvs {
		addr := s.Addr()
		if i == 1 {
			px := testutil.NewDelayProxy(t, addr, 2*time.Millisecond)
			px.Slow.Store(true)
			addr = px.Addr()
		}
		cs = append(cs, goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second}))
	}
	l, err := redlock.New(cs, redlock.WithCloseClients(true), distlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(nt))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var worst time.Duration
	for round, key := range keys {
		type result struct {
			ls  *distlock.Lease
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			ls, err := l.Acquire(actx, key)
			done <- result{ls, err, time.Now()}
		}()
		time.Sleep(2 * time.Second) // the waiter splits again and again
		freed := time.Now()
		_ = leases[round].Release(ctx)
		r := <-done
		if r.err != nil {
			t.Fatalf("round %d: %v", round, r.err)
		}
		lag := r.at.Sub(freed)
		t.Logf("round %d: taken %v after the holder's release began", round, lag.Round(time.Millisecond))
		worst = max(worst, lag)
		_ = r.ls.Release(ctx)
	}
	if worst > 2*nt+100*time.Millisecond {
		t.Errorf("the lone waiter took a released lock up to %v after the release (node timeout %v, no contenders)", worst.Round(time.Millisecond), nt)
	}
}
