package redlock_test

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
	"github.com/distlock/distlock/redlock"
)

// TestSplitVotesWithHungNode: Lockers contend for one key on three nodes,
// one of them hung (SIGSTOP). Each attempt that takes one live node waited
// out the hung node's timeout before it failed, and the give-backs' notices
// woke the contenders together, so they split the two live nodes again and
// again (a livelock the fault harness's hang-server fault found: with three
// contenders every Acquire took 1.6-7.6 s). A random pause after such a
// split set three apart, but not eight (Acquires hit their 10 s
// deadlines, worst 8.9 s). Now an attempt does not wait for a node whose
// last call timed out once the live nodes have decided, and the pause
// range doubles with each split in a row. The bound is a generous liveness
// bound.
func TestSplitVotesWithHungNode(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	var lockers []distlock.Locker
	for range 8 {
		lockers = append(lockers, newLocker(t, srvs, distlock.WithTTL(time.Second)))
	}
	if err := srvs[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srvs[0].Resume() }()
	// Healthy runs take up to 3.2 s on a loaded 2-core machine (8 waiters
	// racing, no queue); the lockstep split made Acquires hit their 10 s
	// deadlines.
	const bound = 6 * time.Second
	var (
		mu             sync.Mutex
		worst          time.Duration
		grants, failed int
		wg             sync.WaitGroup
	)
	stop := time.Now().Add(15 * time.Second)
	for _, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				began := time.Now()
				ls, err := l.Acquire(actx, "split", distlock.WithAutoRenew(true))
				cancel()
				mu.Lock()
				worst = max(worst, time.Since(began))
				if err == nil {
					grants++
				} else {
					failed++
				}
				mu.Unlock()
				if err != nil {
					continue
				}
				time.Sleep(5 * time.Millisecond)
				_ = ls.Release(ctx)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants, %d failed Acquires in 15 s with node 0 hung; worst Acquire %v", grants, failed, worst.Round(time.Millisecond))
	if worst > bound || failed > 0 {
		t.Errorf("worst Acquire took %v, %d failed, with node 0 hung (bound %v): the contenders split the live nodes in lockstep",
			worst.Round(time.Millisecond), failed, bound)
	}
}

// TestTryAcquireDoesNotPauseAfterSplit: the split-vote pause is
// for waiting Acquires, which would try again together; a TryAcquire
// returns at once and its caller decides what comes next. Node 0 hung, the
// key held on node 1: a TryAcquire of a fresh Locker (node 0 not yet known
// to hang) takes node 2, hears "held" from node 1 and waits out node 0's
// timeout; it paused up to two node timeouts more.
func TestTryAcquireDoesNotPauseAfterSplit(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := context.Background()
	k := redisnode.KeysFor(redis.DefaultPrefix, "k")
	if r, err := redisnode.AcquireOn(ctx, clients(t, srvs[1:2], false)[0], k, "other-holder", time.Minute, ""); err != nil || !r.Acquired {
		t.Fatalf("node 1: %+v %v", r, err)
	}
	if err := srvs[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srvs[0].Resume() }()
	const nt = 500 * time.Millisecond
	for i := range 5 {
		l := newLocker(t, srvs, distlock.WithTTL(time.Minute), redlock.WithNodeTimeout(nt))
		// Node 0's timeout, then its give-back's (the attempt waits for
		// the give-backs of the nodes that answered, a timeout included):
		// two node timeouts; the pause added up to two more.
		if d := timedTry(t, l, "k", i, distlock.ErrNotAcquired); d > 5*nt/2 {
			t.Errorf("try %d took %v with node timeout %v: it paused after the split vote", i, d.Round(time.Millisecond), nt)
		}
	}
}

// TestNoSplitPauseWhenAllNodesUp: five healthy nodes, the key held on four
// of them (a holder Locker over nodes 0-3). A TryAcquire over all five gets
// yes from node 4 and "held" from the rest; gather stops early at 1 yes + 3
// held (quorum 3 unreachable), so the fifth reply is merely unread, not
// silent. The split-vote pause must not fire: every node is up.
func TestNoSplitPauseWhenAllNodesUp(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	ctx := context.Background()
	// Another owner's lock on nodes 0-3 (as a holder that took four of five).
	k := redisnode.KeysFor(redis.DefaultPrefix, "k")
	for i, c := range clients(t, srvs[:4], true) {
		r, err := redisnode.AcquireOn(ctx, c, k, "other-holder", time.Minute, "")
		if err != nil || !r.Acquired {
			t.Fatalf("node %d: %+v %v", i, r, err)
		}
	}
	const nt = time.Second
	c := newLocker(t, srvs, distlock.WithTTL(time.Minute), redlock.WithNodeTimeout(nt))
	var worst time.Duration
	slow := 0
	for i := range 10 {
		d := timedTry(t, c, "k", i, distlock.ErrNotAcquired)
		worst = max(worst, d)
		if d > 100*time.Millisecond {
			slow++
		}
	}
	if slow > 0 {
		t.Errorf("%d of 10 TryAcquires against 5 healthy nodes took >100ms (worst %v, node timeout %v): the split-vote pause fired with no node down",
			slow, worst.Round(time.Millisecond), nt)
	}
}

// timedTry runs try i, a TryAcquire of key that must fail with want, and
// returns how long it took.
func timedTry(t *testing.T, l distlock.Locker, key string, i int, want error) time.Duration {
	t.Helper()
	began := time.Now()
	_, err := l.TryAcquire(context.Background(), key)
	d := time.Since(began)
	if !errors.Is(err, want) {
		t.Fatalf("try %d: %v, want %v", i, err, want)
	}
	t.Logf("try %d: %v: %v", i, d.Round(time.Millisecond), err)
	return d
}
