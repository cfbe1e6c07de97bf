package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// Watch on etcd: the backend's Subscription, driven by hand.

// quiet is how long a Wait is given to show that no notice is pending.
const quiet = 300 * time.Millisecond

// waitNotice fails unless sub gives a notice within 5s.
func waitNotice(t *testing.T, sub driver.Subscription, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := sub.Wait(ctx); err != nil {
		t.Fatalf("%s: Wait = %v, want a notice", what, err)
	}
}

// waitNone fails if sub gives a notice (or an error) within quiet.
func waitNone(t *testing.T, sub driver.Subscription, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), quiet)
	defer cancel()
	if err := sub.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: Wait = %v, want no notice", what, err)
	}
}

// A notice for each grant, hand-over, release and expiry; none for a
// Refresh that moves the key to a lease of another TTL; one for a burst
// of changes that came in while nobody waited.
func TestWatchNotices(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	b, _ := e.backendLocker()
	const key = "notices"
	sub, err := b.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	l := e.locker()
	waitNone(t, sub, "nothing changed yet")

	first, err := l.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitNotice(t, sub, "a grant")
	if err := first.Refresh(ctx, distlock.WithTTL(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitNone(t, sub, "a Refresh to another TTL (same holder, same token)")

	next := make(chan *distlock.Lease, 1)
	go func() {
		ls, err := e.locker().Acquire(ctx, key, distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		next <- ls
	}()
	waitNotice(t, sub, "a waiter joining") // not a holder change, but etcd cannot tell
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitNotice(t, sub, "a hand-over to the waiter")
	second := <-next
	if second == nil {
		t.FailNow()
	}
	if err := revokeOwner(ctx, e.admin, DefaultPrefix, key); err != nil {
		t.Fatal(err)
	}
	waitNotice(t, sub, "the holder's lease ending on the server")

	// A burst: six changes before the next Wait give one notice.
	for range 3 {
		ls, err := l.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(quiet) // all of it delivered to the client
	waitNotice(t, sub, "a burst of grants and releases")
	extra := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, quiet)
		err := sub.Wait(wctx)
		cancel()
		if err != nil {
			break
		}
		extra++
	}
	// One notice is the aim; a second or third may slip through when the
	// client's goroutine is slow to hand over what it holds (3 once in a
	// full run under -race on 2 busy cores). Six would be no coalescing at
	// all: every response waiting in the client would be a notice.
	if extra > 2 {
		t.Fatalf("a burst of 6 changes gave %d notices", 1+extra)
	}

	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := sub.Wait(wctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after Close = %v, want the watch's end", err)
	}
}

// Watch returns only once the server has made the watch, so a change made
// right after it returns is heard: while the server is paused, Watch does
// not return; once it is back, Watch returns and hears the next change.
// Then, in rounds, another client makes a change, on a connection of its
// own, the moment Watch returns.
func TestWatchReturnsOnceMade(t *testing.T) {
	s := testserver.Etcd(t)
	e := &env{t: t, addr: s.Addr(), admin: newClient(t, []string{s.Addr()})}
	ctx := ctxT(t, 60*time.Second)
	b, _ := e.backendLocker()
	other := e.locker()
	if _, err := e.admin.Get(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	type made struct {
		sub driver.Subscription
		err error
	}
	ch := make(chan made, 1)
	go func() {
		sub, err := b.Watch(ctx, "paused")
		ch <- made{sub, err}
	}()
	select {
	case m := <-ch:
		_ = s.Resume()
		t.Fatalf("Watch returned (%v) while the server was paused, before it could have made the watch", m.err)
	case <-time.After(quiet):
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	m := <-ch
	if m.err != nil {
		t.Fatal(m.err)
	}
	if _, err := e.admin.Put(ctx, queuePrefix(DefaultPrefix, "paused")+"someone", ""); err != nil {
		t.Fatal(err)
	}
	waitNotice(t, m.sub, "a grant after a Watch made while the server was paused")
	_ = m.sub.Close()

	// A server that stays away past the bound: Watch fails (and the
	// portable layer polls), leaving nothing behind.
	eventually(t, "no watch left on the server after Close", func() (bool, string) {
		n := watchers(t, e.addr)
		return n == 0, fmt.Sprintf("%d watches", n)
	})
	b.watchCreate = quiet
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err := b.Watch(ctx, "paused-long")
	if rerr := s.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil || !strings.Contains(err.Error(), "not confirmed") {
		t.Fatalf("Watch on a server paused past the bound: %v, want an error", err)
	}
	b.watchCreate = defaultWatchCreate
	// The client (clientv3 3.5) forgets a watch cancelled before the
	// server confirmed it, and cancels it on the server only when an
	// event for it arrives: the next change of the key.
	time.Sleep(quiet)
	t.Logf("watches on the server after the failed Watch: %d", watchers(t, e.addr))
	if _, err := e.admin.Put(ctx, queuePrefix(DefaultPrefix, "paused-long")+"someone", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no watch left on the server by the Watch that failed, once its key changed", func() (bool, string) {
		n := watchers(t, e.addr)
		return n == 0, fmt.Sprintf("%d watches", n)
	})

	for i := range 30 {
		key := fmt.Sprint("right-after-", i)
		sub, err := b.Watch(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := other.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		waitNotice(t, sub, fmt.Sprintf("a grant right after Watch returned (round %d)", i))
		_ = sub.Close()
		_ = ls.Release(ctx)
	}
}

// watchers reads the server's count of its watches (etcd's metric).
func watchers(t *testing.T, addr string) int {
	t.Helper()
	return metric(t, addr, "etcd_debugging_mvcc_watcher_total")
}

// Close leaves no goroutine of the client behind and no watch on the
// server; the backend's Close ends the watches it made.
func TestWatchCloseLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	cli := newClient(t, []string{e.addr})
	if _, err := cli.Get(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	ours := []string{"github.com/distlock/distlock", "go.etcd.io/etcd/client/v3"}
	base, _ := testutil.Goroutines(ours...)
	serverBase := watchers(t, e.addr)
	b, err := newBackend(cli, false, []driver.Option{WithLossWatch(false).DriverOption()})
	if err != nil {
		t.Fatal(err)
	}
	var subs []driver.Subscription
	for i := range 3 {
		sub, err := b.Watch(ctx, fmt.Sprint("close-", i))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if n := watchers(t, e.addr); n != serverBase+3 {
		t.Fatalf("%d watches on the server with 3 made, %d before", n, serverBase)
	}
	for _, sub := range subs {
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		_ = sub.Close() // idempotent
	}
	eventually(t, "the server's watches gone after Close", func() (bool, string) {
		n := watchers(t, e.addr)
		return n == serverBase, fmt.Sprintf("%d watches, %d before", n, serverBase)
	})
	testutil.CheckNoGoroutines(t, base, ours...)

	// One left open: the backend's Close ends it.
	sub, err := b.Watch(ctx, "left-open")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := sub.Wait(wctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after the backend's Close = %v, want the watch's end", err)
	}
	eventually(t, "the server's watches gone after the backend's Close", func() (bool, string) {
		n := watchers(t, e.addr)
		return n == serverBase, fmt.Sprintf("%d watches, %d before", n, serverBase)
	})
	testutil.CheckNoGoroutines(t, base, ours...)
	if _, err := b.Watch(ctx, "after-close"); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("Watch on a closed backend: %v, want ErrClosed", err)
	}
}

// A watch that loses track (the server restarted and the revisions it
// missed were compacted before it came back) never stays silent: Wait
// gives a notice of the change or fails, so the portable layer reads
// again (and polls).
func TestWatchAcrossRestartAndCompaction(t *testing.T) {
	s := testserver.Etcd(t)
	ctx := ctxT(t, 60*time.Second)
	b, err := newBackend(newClient(t, []string{s.Addr()}), false, []driver.Option{WithLossWatch(false).DriverOption()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const key = "restart"
	sub, err := b.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// A fresh client, so that it is connected before the watch's client
	// comes back: a grant, then a compaction past it.
	admin := newClient(t, []string{s.Addr()})
	resp, err := admin.Put(ctx, queuePrefix(DefaultPrefix, key)+"someone", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	switch err := sub.Wait(wctx); {
	case err == nil:
		t.Log("the watch came back before the compaction and heard the grant")
	case errors.Is(err, context.DeadlineExceeded):
		t.Fatal("a grant made while the watch was away, then compacted: Wait stayed silent")
	default:
		t.Logf("the watch failed, as it should when it cannot resume: %v", err)
	}
}

// A member cut off from the leader ends the watch (WithRequireLeader)
// rather than keeping it silent while the others go on.
func TestWatchEndsWithoutLeader(t *testing.T) {
	c := testserver.EtcdCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	only := c.Members[0]
	b, err := newBackend(newClient(t, []string{only.Addr()}), false, []driver.Option{WithLossWatch(false).DriverOption()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sub, err := b.Watch(ctx, "no-leader")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, m := range c.Members[1:] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = sub.Wait(wctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a member without a leader = %v, want the watch's end", err)
	}
	t.Logf("Wait: %v", err)
}
