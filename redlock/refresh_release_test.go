package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// A Refresh(WithTTL(shorter)) whose caller stops waiting still runs on the
// nodes (node calls are detached): the lease must take the shorter deadline,
// or another client takes the key while it reports held.
func TestFailedShorterRefreshShortensLease(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	const key = "rr-short"
	a, hs := hooked(t, srvs, nil)
	b := newLocker(t, srvs)
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		h.delayNext.Store(int64(40 * time.Millisecond)) // a slow link, well inside the node timeout
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	err = la.Refresh(rctx, distlock.WithTTL(300*time.Millisecond))
	cancel()
	if err == nil {
		t.Fatal("refresh succeeded; the schedule needs it to fail")
	}
	t.Logf("refresh: %v; lease Err=%v, expires in %v", err, la.Err(), time.Until(la.Expires()))
	time.Sleep(500 * time.Millisecond)
	lb, err := b.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Logf("B could not acquire: %v", err)
		return
	}
	defer lb.Release(ctx)
	if la.Err() == nil && lb.Err() == nil {
		t.Fatalf("two holders: A token %d Err=nil (expires in %v), B token %d Err=nil",
			la.Token(), time.Until(la.Expires()), lb.Token())
	}
	if !errors.Is(la.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("A: %v", la.Err())
	}
}

// A release that freed the lock on a majority is a release, even when the
// release timeout cuts the wait for a paused third node: Do must not report
// a function that ran under a held lease as lost.
func TestReleaseOnMajorityIsRelease(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	const key = "rr-rel"
	// TTL 10s: node timeout 200ms (default); release timeout 150ms.
	a := newLocker(t, srvs, distlock.WithReleaseTimeout(150*time.Millisecond), distlock.WithTTL(10*time.Second))
	b := newLocker(t, srvs)
	if err := srvs[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer srvs[2].Resume()
	var held *distlock.Lease
	err := a.Do(ctx, key, func(ctx context.Context, l *distlock.Lease) error {
		held = l
		return nil
	})
	// The lock is free on a majority right away: another client gets it.
	lb, berr := b.TryAcquire(ctx, key, distlock.WithTTL(time.Second))
	if berr == nil {
		_ = lb.Release(ctx)
	}
	t.Logf("B after A's Do: %v", berr)
	if err != nil {
		t.Fatalf("fn returned nil under a held lease, the lock was released on 2 of 3 nodes, yet Do = %v (ErrLeaseLost: %v; lease Err: %v)",
			err, errors.Is(err, distlock.ErrLeaseLost), held.Err())
	}
}

// A successful Refresh(WithTTL(shorter)) moves each node's known expiry
// back; a node that then goes silent must not count as unbroken by the old,
// longer expiry. Schedule (an early expiry on node 1 emulates a clock jump,
// the fault the unbroken rule exists for): A holds {0,1,2} with TTL 5s,
// shrinks to 500ms; A's link to node 2 is cut and node 2's lock expires;
// node 1's lock expires early; B takes {1,2} and releases. A's next
// Refresh must report the lease lost, not take node 1 back.
func TestShorterTTLUpdatesNodeExpiry(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	const key = "rr-stale"
	a, hs := hooked(t, srvs, nil)
	b := newLocker(t, srvs)
	admins := clients(t, srvs, false)
	const short = 500 * time.Millisecond
	first := 5 * time.Second
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(first))
	if err != nil {
		t.Fatal(err)
	}
	lockKey := redisnode.KeysFor(redis.DefaultPrefix, key).Lock
	// Until node 2 has the short TTL: on a loaded machine the acquire's
	// call to node 2 may land after the first shortening refresh (the
	// quorum was {0,1}) and set the 5s TTL again.
	for end := time.Now().Add(5 * time.Second); ; {
		if err := la.Refresh(ctx, distlock.WithTTL(short)); err != nil {
			t.Fatal(err)
		}
		if ttl, err := admins[2].PTTL(ctx, lockKey).Result(); err == nil && ttl > 0 && ttl <= short {
			break
		}
		if time.Now().After(end) {
			t.Fatal("node 2 never took the short TTL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	hs[2].cut.Store(true)
	// Keep A alive on {0,1} while node 2's lock runs out.
	for end := time.Now().Add(short + 200*time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err := la.Refresh(ctx); err != nil {
			t.Fatalf("A refresh on {0,1}: %v", err)
		}
	}
	if n, _ := admins[2].Exists(ctx, lockKey).Result(); n != 0 {
		t.Fatal("node 2 still holds A's lock")
	}
	_ = admins[1].Del(ctx, lockKey).Err() // early expiry on node 1
	lb, err := b.TryAcquire(ctx, key, distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	t.Logf("B took {1,2} with token %d (A's %d), A Err=%v", lb.Token(), la.Token(), la.Err())
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = la.Refresh(ctx)
	if err == nil && la.Err() == nil {
		t.Fatalf("A's refresh repaired after a majority {1,2} was free and held by B: A still held (node 2 counted by a stale expiry)")
	}
	t.Logf("A: %v", err)
}

// Close with a paused node and a renewing lease returns within a couple of
// node timeouts and leaves no goroutine of the Locker behind.
func TestCloseWithPausedNodeLeavesNothing(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	base := runtime.NumGoroutine()
	cs := clients(t, srvs, false)
	l, err := redlock.New(cs, redlock.WithNodeTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var leases []*distlock.Lease
	for i := range 5 {
		ls, err := l.Acquire(ctx, fmt.Sprint("rr-close-", i), distlock.WithTTL(3*time.Second), distlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, ls)
	}
	_ = srvs[2].Pause()
	defer srvs[2].Resume()
	time.Sleep(1200 * time.Millisecond) // renewals with straggling calls to node 2
	go func() { _ = leases[0].Release(context.Background()) }()
	_, _ = l.TryAcquire(ctx, "rr-close-0")
	began := time.Now()
	if err := l.Close(); err != nil {
		t.Log(err)
	}
	took := time.Since(began)
	t.Logf("Close took %v", took)
	if took > 2*time.Second {
		t.Fatalf("Close took %v", took)
	}
	for _, ls := range leases {
		if ls.Err() == nil {
			t.Fatal("lease still held after Close")
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := runtime.NumGoroutine(); n > base+len(cs)*4 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Close (base %d):\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}
