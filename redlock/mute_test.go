package redlock_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// A failed attempt of a waiting Acquire lost to "held" answers alone mutes,
// on its own subscription, the nodes it took (and those it left unread):
// their release notices are its own give-backs; while muted, its Wait ends
// within mutedPoll. These tests check that it does not spin on them, and
// that it still finds every release, recovery or deletion that lets it have
// the lock.

// acquired is the outcome of a waiting Acquire and when it returned.
type acquired struct {
	ls  *distlock.Lease
	err error
	at  time.Time
}

// acquireLater starts a waiting Acquire of key, bounded by d.
func acquireLater(l distlock.Locker, key string, d time.Duration) <-chan acquired {
	done := make(chan acquired, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		ls, err := l.Acquire(ctx, key)
		done <- acquired{ls, err, time.Now()}
	}()
	return done
}

// takenAfter waits for done's lease, releases it, and says how long after
// from it was taken.
func takenAfter(t *testing.T, done <-chan acquired, from time.Time) time.Duration {
	t.Helper()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	_ = r.ls.Release(context.Background())
	return r.at.Sub(from)
}

// heldOnSomeNodes takes key with holder while the nodes in down are
// stopped, then brings them back empty: a lease held on the other nodes
// only.
func heldOnSomeNodes(t *testing.T, srvs []*testserver.Server, holder distlock.Locker, key string, down ...int) *distlock.Lease {
	t.Helper()
	ctx := context.Background()
	for _, i := range down {
		if err := srvs[i].Stop(); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := holder.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // the holder's calls to them are over
	for _, i := range down {
		if err := srvs[i].Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return ls
}

// TestLoneWaiterDoesNotSpinOnOwnGiveBack: a lease held on nodes 0 and 1 only (node 2 was down when it
// was taken, and came back empty). Each attempt of a lone waiter took node
// 2, heard "held" from nodes 0 and 1, and gave node 2 back; the give-back's
// release notice woke the waiter again ~3 ms later: ~650 attempts a second,
// each leaving a tombstone for TTL + 5 s, for as long as the lease was held.
// Only a release on a node that said "held" can change that vote.
func TestLoneWaiterDoesNotSpinOnOwnGiveBack(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := context.Background()
	holder := newLocker(t, srvs, distlock.WithTTL(30*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))
	ls := heldOnSomeNodes(t, srvs, holder, "k", 2)
	admin := clients(t, srvs[2:], false)[0]
	waiter := newLocker(t, srvs, distlock.WithTTL(10*time.Second))
	before := scriptCalls(t, admin)
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := waiter.Acquire(actx, "k")
	cancel()
	if err == nil {
		t.Fatal("the waiter acquired a key held on a majority")
	}
	calls := scriptCalls(t, admin) - before
	t.Logf("a 2 s waiting Acquire (%v): %d script calls on node 2", err, calls)
	if calls > 40 { // 10 attempts a second; it was ~700
		t.Errorf("the lone waiter made ~%d attempts in 2 s: it spins on its own give-backs' notices", calls/2)
	}

	// A release of the lease still wakes the waiter at once.
	done := acquireLater(waiter, "k", 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lag := takenAfter(t, done, released)
	t.Logf("taken %v after the release", lag.Round(time.Millisecond))
	if lag > time.Second {
		t.Errorf("the waiter took the released lock %v after the release: it missed the notice", lag)
	}
}

// TestWaiterHearsSuspectRecover: node 0 hung or
// down, a crashed client's lock on node 2 alone. Each attempt takes node 1,
// hears "held" from node 2 and does not wait for node 0 (a suspect). Muting
// nodes 0 and 1, a majority, kept the waiter asleep 9.2-9.4 s after node 0
// came back (two fallback polls) where it took the lock 80-135 ms later
// before the mute.
func TestWaiterHearsSuspectRecover(t *testing.T) {
	for _, down := range []bool{false, true} {
		t.Run(map[bool]string{false: "hung", true: "down"}[down], func(t *testing.T) {
			srvs := testserver.RedisN(t, 3)
			ctx := context.Background()
			const nt = 200 * time.Millisecond
			l := newLocker(t, srvs, distlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(nt))
			stopOrHang(t, srvs[0], down)
			minorityLock(t, srvs, "k", 30*time.Second)
			done := acquireLater(l, "k", 20*time.Second)
			time.Sleep(1500 * time.Millisecond)
			if down {
				if err := srvs[0].Restart(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := srvs[0].Resume(); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			lag := takenAfter(t, done, back)
			t.Logf("node 0 back: the waiter took the lock %v later", lag.Round(time.Millisecond))
			if lag > 2*time.Second {
				t.Errorf("the waiter took a lock it could have %v after node 0 came back", lag.Round(time.Millisecond))
			}
		})
	}
}

// TestWaiterDoesNotSpinOnFiveNodes: as TestLoneWaiterDoesNotSpinOnOwnGiveBack
// with 5 nodes and the lease on exactly 3 (2,849 script calls on the two
// free nodes in 2 s before the mute).
func TestWaiterDoesNotSpinOnFiveNodes(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	ctx := context.Background()
	holder := newLocker(t, srvs, distlock.WithTTL(30*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))
	ls := heldOnSomeNodes(t, srvs, holder, "k", 3, 4)
	admins := clients(t, srvs[3:], false)
	waiter := newLocker(t, srvs, distlock.WithTTL(10*time.Second))
	calls := func() int64 { return scriptCalls(t, admins[0]) + scriptCalls(t, admins[1]) }
	before := calls()
	done := acquireLater(waiter, "k", 10*time.Second)
	time.Sleep(2 * time.Second)
	n := calls() - before
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lag := takenAfter(t, done, released)
	t.Logf("2 s of waiting: %d script calls on nodes 3 and 4; taken %v after the release", n, lag.Round(time.Millisecond))
	if n > 80 {
		t.Errorf("the waiter spins: %d script calls on nodes 3 and 4 in 2 s", n)
	}
	if lag > time.Second {
		t.Errorf("taken %v after the release", lag)
	}
}

// TestWaitersDoNotPingPong: four waiters on four Lockers against a lease
// on 2 of 3 nodes. Each one's give-back of node 2 must not wake the others
// in turn (6,877 script calls on node 2 in 3 s before the mute), and all
// must wake at the release.
func TestWaitersDoNotPingPong(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := context.Background()
	holder := newLocker(t, srvs, distlock.WithTTL(30*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))
	ls := heldOnSomeNodes(t, srvs, holder, "k", 2)
	admin := clients(t, srvs[2:], false)[0]
	const waiters = 4
	var wg sync.WaitGroup
	takenAt := make(chan time.Time, waiters)
	before := scriptCalls(t, admin)
	for range waiters {
		w := newLocker(t, srvs, distlock.WithTTL(10*time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			l2, err := w.Acquire(actx, "k")
			if err != nil {
				t.Error(err)
				return
			}
			takenAt <- time.Now()
			time.Sleep(20 * time.Millisecond)
			_ = l2.Release(ctx)
		}()
	}
	time.Sleep(3 * time.Second)
	calls := scriptCalls(t, admin) - before
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(takenAt)
	var lags []time.Duration
	for at := range takenAt {
		lags = append(lags, at.Sub(released).Round(time.Millisecond))
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	t.Logf("%d waiters, 3 s: %d script calls on node 2; taken after the release at %v", waiters, calls, lags)
	if calls > 240 {
		t.Errorf("the waiters wake each other: %d script calls on node 2 in 3 s", calls)
	}
	if len(lags) == waiters && lags[waiters-1] > waiters*500*time.Millisecond {
		t.Errorf("the last waiter took the lock %v after the release", lags[waiters-1])
	}
}

// TestWaiterHearsFailedNodeRecover: node 0 out of
// memory (its writes fail at once: a failure, not a suspect), a crashed
// client's lock on node 2. Each attempt takes node 1, hears "held" from
// node 2, and node 0 fails: node 0 could have decided the vote. Node 0
// then recovers, which publishes nothing; muting node 1 left the waiter
// only its 5 s fallback poll: it took the lock 3.5-4.1 s after, where it
// had taken it within 10-276 ms (the split pause paces those attempts).
func TestWaiterHearsFailedNodeRecover(t *testing.T) {
	const nt = 200 * time.Millisecond
	srvs := testserver.RedisN(t, 3)
	ctx := context.Background()
	full := clients(t, srvs[:1], false)[0]
	if err := full.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, srvs, distlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(nt))
	var worst time.Duration
	for round, key := range []string{"k0", "k1", "k2"} {
		if err := full.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		minorityLock(t, srvs, key, 30*time.Second)
		done := acquireLater(l, key, 20*time.Second)
		time.Sleep(1500 * time.Millisecond)
		if err := full.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		lag := takenAfter(t, done, back)
		t.Logf("round %d: node 0 writable again: the waiter took the lock %v later", round, lag.Round(time.Millisecond))
		worst = max(worst, lag)
	}
	if worst > 2*time.Second {
		t.Errorf("the waiter took a lock it could have up to %v after node 0 recovered (node timeout %v)", worst.Round(time.Millisecond), nt)
	}
}

// TestWaiterHearsExpiryAfterHang: crashed clients'
// locks on node 2 (30 s) and node 0 (6.5 s), node 1 free. Node 0 hangs
// from 1 s to 6 s; the waiter's fallback poll meets the hang (a timeout, no
// TTL learned from node 0). Node 0 comes back holding its lock, which then
// expires without a notice. Muting node 1 left the waiter asleep 4.2 s
// past that expiry (3-4 ms before the mute).
func TestWaiterHearsExpiryAfterHang(t *testing.T) {
	const nt = 200 * time.Millisecond
	srvs := testserver.RedisN(t, 3)
	ctx := context.Background()
	cs := clients(t, srvs, false)
	k := redisnode.KeysFor(redis.DefaultPrefix, "k")
	if r, err := redisnode.AcquireOn(ctx, cs[2], k, "crashed-2", 30*time.Second, ""); err != nil || !r.Acquired {
		t.Fatalf("node 2: %+v %v", r, err)
	}
	const ttl0 = 6500 * time.Millisecond
	if r, err := redisnode.AcquireOn(ctx, cs[0], k, "crashed-0", ttl0, ""); err != nil || !r.Acquired {
		t.Fatalf("node 0: %+v %v", r, err)
	}
	freed := time.Now().Add(ttl0) // then nodes 0 and 1 are free
	l := newLocker(t, srvs, distlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(nt))
	done := acquireLater(l, "k", 20*time.Second)
	time.Sleep(time.Second)
	if err := srvs[0].Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := srvs[0].Resume(); err != nil {
		t.Fatal(err)
	}
	lag := takenAfter(t, done, freed)
	t.Logf("the waiter took the lock %v after node 0's lock expired", lag.Round(time.Millisecond))
	if lag > 2*time.Second {
		t.Errorf("the waiter took a lock it could have %v after it was free on nodes 0 and 1 (node timeout %v)", lag.Round(time.Millisecond), nt)
	}
}

// TestWaiterHearsHeldNodeCleared: another client's
// lock on nodes 0 and 1, node 2 free; the waiter's attempts take node 2 and
// mute it. Node 0's lock then goes away without a release notice: deleted
// by hand, the node flushed, or restarted empty; the waiter could have the
// lock at once. Muted, it found out only by its fallback poll, 3.5 s later
// (6.5 s for a lock without expiry and WithBackoff(10ms, 8s)), where its
// spin had found it in 3-4 ms; a Wait with nodes muted now ends within
// half a second.
func TestWaiterHearsHeldNodeCleared(t *testing.T) {
	for _, how := range []string{"del", "flushall", "restart", "persist-del"} {
		t.Run(how, func(t *testing.T) {
			srvs := testserver.RedisN(t, 3)
			ctx := context.Background()
			cs := clients(t, srvs, false)
			k := redisnode.KeysFor(redis.DefaultPrefix, "k")
			for _, i := range []int{0, 1} {
				if r, err := redisnode.AcquireOn(ctx, cs[i], k, "crashed", 30*time.Second, ""); err != nil || !r.Acquired {
					t.Fatalf("node %d: %+v %v", i, r, err)
				}
				if how == "persist-del" { // no TTL: no RetryAfter
					if err := cs[i].Persist(ctx, k.Lock).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			opts := []distlock.Option{distlock.WithTTL(10 * time.Second), redlock.WithNodeTimeout(200 * time.Millisecond)}
			if how == "persist-del" {
				opts = append(opts, distlock.WithBackoff(10*time.Millisecond, 8*time.Second))
			}
			l := newLocker(t, srvs, opts...)
			done := acquireLater(l, "k", 25*time.Second)
			time.Sleep(1500 * time.Millisecond)
			switch how {
			case "del", "persist-del":
				if err := cs[0].Del(ctx, k.Lock).Err(); err != nil {
					t.Fatal(err)
				}
			case "flushall":
				if err := cs[0].FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			case "restart":
				if err := srvs[0].Stop(); err != nil {
					t.Fatal(err)
				}
				if err := srvs[0].Restart(ctx); err != nil {
					t.Fatal(err)
				}
			}
			freed := time.Now()
			lag := takenAfter(t, done, freed)
			t.Logf("%s: the waiter took the lock %v after node 0 was free", how, lag.Round(time.Millisecond))
			if lag > 1500*time.Millisecond {
				t.Errorf("%s: the waiter took a lock it could have %v after node 0 was free", how, lag.Round(time.Millisecond))
			}
		})
	}
}
