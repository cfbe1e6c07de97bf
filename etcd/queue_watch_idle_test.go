package etcd

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// More queues than the loss watch keeps idle (maxIdle) are locked and
// released, so the longest idle are evicted at the next sweep, while the
// first of them is locked again: the new lock of an evicted queue, and one
// whose queue is being evicted, are still reported when their keys are
// deleted right after the grant.
func TestLossNoticeAfterIdleQueueEvicted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 120*time.Second)
	b, l := e.backendLocker()
	for round := range 3 {
		for i := range maxIdle + 16 {
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("idle-%d", i), distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Around the sweeps (every progressEvery) that evict the
		// overflow: lock the first queues again and lose them at once.
		for i := range 16 {
			ls, err := l.Acquire(ctx, fmt.Sprintf("idle-%d", i), distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.admin.Delete(ctx, ownerKey(t, ls)); err != nil {
				t.Fatal(err)
			}
			waitLost(t, ls, fmt.Sprintf("round %d: queue idle-%d locked again around its eviction", round, i))
			time.Sleep(time.Duration(i) * 20 * time.Millisecond)
		}
	}
	b.loss.mu.Lock()
	n := len(b.loss.queues)
	b.loss.mu.Unlock()
	t.Logf("%d queues watched at the end", n)
}

// The loss watch's session is made again while its member hangs; the
// Locker closes meanwhile (its lock still held): once the member is back,
// nothing of the loss watch or its tries may be left running.
func TestCloseDuringLossWatchReconnect(t *testing.T) {
	s := testserver.Etcd(t)
	ctx := ctxT(t, 90*time.Second)
	cli := newClient(t, []string{s.Addr()})
	if _, err := cli.Get(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	ours := []string{"github.com/distlock/distlock", "go.etcd.io/etcd/client/v3"}
	base, _ := testutil.Goroutines(ours...)
	l, err := New(cli, distlock.WithReleaseTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = tryAcquireUntil(ctx, t, l, "close-reconnect")
	time.Sleep(time.Second) // the loss watch is up
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(silentAfter + 1500*time.Millisecond) // a new session is being tried
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		_ = s.Resume()
		t.Fatal("Close did not return within 30s while the member hung")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	testutil.CheckNoGoroutines(t, base, ours...)
}

// Queues released together are locked again one by one around the end of
// their linger (lingerFor), when a sweep ends their watches: each new lock
// is reported when its key is deleted right after the grant, whether it
// came just before the eviction, during it or after.
func TestLossNoticeAroundLingerEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 120*time.Second)
	_, l := e.backendLocker()
	const keys = 30
	for i := range keys {
		ls, err := l.TryAcquire(ctx, fmt.Sprintf("linger-%d", i), distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Now()
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(released.Add(lingerFor - 700*time.Millisecond + time.Duration(i)*80*time.Millisecond)))
			acquire := l.TryAcquire
			if i%2 == 1 {
				acquire = l.Acquire
			}
			ls, err := acquire(ctx, fmt.Sprintf("linger-%d", i), distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := e.admin.Delete(ctx, ownerKey(t, ls)); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-ls.Done():
			case <-time.After(lossNotice):
				t.Errorf("linger-%d, locked %v after its release: Done did not close within %v of its key's deletion",
					i, lingerFor-700*time.Millisecond+time.Duration(i)*80*time.Millisecond, lossNotice)
			}
		}()
	}
	wg.Wait()
}
