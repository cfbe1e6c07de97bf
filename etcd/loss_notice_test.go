package etcd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// The loss notice's bound: while the server answers, Done closes within
// lossNotice of the deletion of a held lock's key, whoever deletes it and
// however (by hand, or by revoking its lease, as the server's expiry of it
// does), whether the Locker's watch of the key's queue is new or old, and
// while other Lockers keep the store busy. Typical notices take a round
// trip or two; the bound is loose, for loaded test machines.

// noticeCase is one way a held lock is lost: take acquires it, kill
// deletes its key (or lease) as someone else would.
type noticeCase struct {
	name string
	take func(ctx context.Context, t *testing.T, l distlock.Locker) *distlock.Lease
	kill func(ctx context.Context, t *testing.T, ls *distlock.Lease)
}

// noticeCases covers a queue's first lock (its watch just made, possibly
// after the key), a queue watched for a while, and a lock taken by a
// hand-off, each lost by a delete by hand and by a revoke of its lease.
func noticeCases(e *env, round int) []noticeCase {
	del := func(ctx context.Context, t *testing.T, ls *distlock.Lease) {
		if _, err := e.admin.Delete(ctx, ownerKey(t, ls)); err != nil {
			t.Fatal(err)
		}
	}
	revoke := func(ctx context.Context, t *testing.T, ls *distlock.Lease) {
		if err := revokeOwner(ctx, e.admin, DefaultPrefix, ls.Key()); err != nil {
			t.Fatal(err)
		}
	}
	fresh := func(name string) func(context.Context, *testing.T, distlock.Locker) *distlock.Lease {
		return func(ctx context.Context, t *testing.T, l distlock.Locker) *distlock.Lease {
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("%s-%d", name, round), distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return ls
		}
	}
	again := func(ctx context.Context, t *testing.T, l distlock.Locker) *distlock.Lease {
		for range 3 { // the queue is watched by now
			ls, err := l.Acquire(ctx, "again", distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		ls, err := l.Acquire(ctx, "again", distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		return ls
	}
	handOff := func(ctx context.Context, t *testing.T, l distlock.Locker) *distlock.Lease {
		key := fmt.Sprintf("hand-off-%d", round)
		held, err := e.locker().TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *distlock.Lease, 1)
		go func() {
			ls, err := l.Acquire(ctx, key, distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- ls
		}()
		for e.queueLen(DefaultPrefix, key) < 2 {
			time.Sleep(10 * time.Millisecond)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		ls := <-got
		if ls == nil {
			t.FailNow()
		}
		return ls
	}
	return []noticeCase{
		{"first lock of its queue, deleted", fresh("fresh-del"), del},
		{"first lock of its queue, lease revoked", fresh("fresh-revoke"), revoke},
		{"queue watched already, deleted", again, del},
		{"taken by a hand-off, lease revoked", handOff, revoke},
	}
}

// noticeTimes runs the first n cases on l (all if n is 0), rounds times, and returns how long each
// loss took to close Done (or lossNotice+1, if it did not within
// lossNotice), by case name. A lock l holds throughout must not end.
func noticeTimes(ctx context.Context, t *testing.T, e *env, l distlock.Locker, rounds, n int) map[string][]time.Duration {
	kept, err := l.TryAcquire(ctx, "kept-"+t.Name(), distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	times := map[string][]time.Duration{}
	for r := range rounds {
		cases := noticeCases(e, r)
		if n > 0 {
			cases = cases[:n]
		}
		for _, c := range cases {
			ls := c.take(ctx, t, l)
			start := time.Now()
			c.kill(ctx, t, ls)
			took := lossNotice + 1
			select {
			case <-ls.Done():
				took = time.Since(start)
				if err := ls.Err(); err == nil || !strings.Contains(err.Error(), "backend reported") {
					t.Errorf("%s: Err = %v, want the backend's loss report", c.name, err)
				}
			case <-time.After(lossNotice):
				_ = ls.Release(ctx)
			}
			times[c.name] = append(times[c.name], took)
		}
	}
	if err := kept.Err(); err != nil {
		t.Errorf("a lock nobody deleted ended: %v", err)
	}
	return times
}

// churn keeps the store moving (other Lockers taking and releasing locks
// under the same prefix) until ctx ends.
func churn(ctx context.Context, e *env, workers int) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range workers {
		l := e.locker()
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				ls, err := l.Acquire(ctx, fmt.Sprintf("churn-%d-%d", i, n%4))
				if err == nil {
					_ = ls.Release(ctx)
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

func TestLossNoticeBound(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	stop := churn(ctx, e, 3)
	defer stop()
	times := noticeTimes(ctx, t, e, e.locker(), 5, 0)
	for name, ds := range times {
		slices.Sort(ds)
		if ds[len(ds)-1] > lossNotice {
			t.Errorf("%s: Done did not close within %v of the loss in %d of %d rounds", name, lossNotice,
				len(ds)-slices.IndexFunc(ds, func(d time.Duration) bool { return d > lossNotice }), len(ds))
		}
		t.Logf("%s: notice after %v (median), %v (max)", name, ds[len(ds)/2].Round(100*time.Microsecond),
			ds[len(ds)-1].Round(100*time.Microsecond))
	}

	// The check can fail: without the loss watch nothing reports the loss
	// before the lock's deadline.
	t.Run("WithoutLossWatch", func(t *testing.T) {
		off := noticeTimes(ctx, t, e, e.locker(WithLossWatch(false)), 1, 1)
		for name, ds := range off {
			if ds[0] <= lossNotice {
				t.Errorf("%s: noticed after %v with the loss watch off", name, ds[0])
			}
		}
	})
}
