package zookeeper

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Subtests of TestStandalone about Watch on this backend: waiters that wake
// no Watch, the key directory coming and going, a session's expiry or
// reconnection under a Watch, what a closed Watch leaves behind.

// waitResult runs sub.Wait for d and returns its error.
func waitResult(sub interface{ Wait(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return sub.Wait(ctx)
}

// noticeWithin bounds a Wait that must return for a change: far above a
// watch event on loopback.
const noticeWithin = 5 * time.Second

// quietFor is how long a Wait that must not return is given.
const quietFor = 500 * time.Millisecond

// testWatchIgnoresWaiters checks that a waiter joining or leaving the queue
// fires the directory watch but does not end Wait, and that the release
// and the next grant do.
func testWatchIgnoresWaiters(t *testing.T, h *zkHarness) {
	holderL, waiterL, l := locker(t, h), locker(t, h), locker(t, h)
	b := backendOf(t, l)
	ctx := ctxFor(t, 30*time.Second)
	key := "watch-waiters-" + t.Name()
	ls, err := holderL.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := b.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	fires := b.dirWatchFires.Load()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = waiterL.Acquire(wctx, key)
	}()
	waitFor(t, "the waiter to queue", func() bool { return len(children(t, h.admin, key)) == 2 })
	if err := waitResult(sub, quietFor); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after a waiter joined: %v, want nothing until its deadline", err)
	}
	// At least: on a loaded host a waiter's attempt may fail for a
	// transient cause, and the waiter leaves and joins again.
	if n := b.dirWatchFires.Load() - fires; n < 1 {
		t.Fatalf("%d directory watches fired for a waiter joining, want at least 1", n)
	}
	stop()
	<-done
	if err := waitResult(sub, quietFor); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after a waiter left: %v, want nothing until its deadline", err)
	}
	if n := b.dirWatchFires.Load() - fires; n < 2 {
		t.Fatalf("%d directory watches fired for a waiter joining and leaving, want at least 2", n)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitResult(sub, noticeWithin); err != nil {
		t.Fatalf("Wait after the release: %v", err)
	}
	ls, err = waiterL.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitResult(sub, noticeWithin); err != nil {
		t.Fatalf("Wait after the next grant: %v", err)
	}
	ls.Release(ctx)
}

// testWatchDirectoryComesAndGoes watches a key whose directory does not
// exist yet, is created by a grant, and is reaped once empty: every grant
// and release ends a Wait, including the changes made while no Wait ran.
func testWatchDirectoryComesAndGoes(t *testing.T, h *zkHarness) {
	other, l := locker(t, h), locker(t, h)
	b := backendOf(t, l)
	ctx := ctxFor(t, 60*time.Second)
	key := "watch-dir-" + t.Name()
	dir := DefaultBasePath + "/" + escapeKey(key)
	sub, err := b.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := waitResult(sub, quietFor); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a key never used: %v, want nothing until its deadline", err)
	}
	grant := func(what string) *distlock.Lease {
		t.Helper()
		ls, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitResult(sub, noticeWithin); err != nil {
			t.Fatalf("Wait after %s: %v", what, err)
		}
		return ls
	}
	release := func(ls *distlock.Lease, what string) {
		t.Helper()
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := waitResult(sub, noticeWithin); err != nil {
			t.Fatalf("Wait after %s: %v", what, err)
		}
	}
	release(grant("a grant that created the directory"), "its release")
	waitFor(t, "the empty key directory to be reaped", func() bool {
		ok, _, err := h.admin.Exists(dir)
		return err == nil && !ok
	})
	// The reaping itself may end a Wait (whatever came and went before it
	// is unknown); after that, a grant must.
	_ = waitResult(sub, quietFor)
	release(grant("a grant that recreated the reaped directory"), "its release")

	// Changes made while no Wait runs: the next Wait returns for them.
	ls, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitResult(sub, noticeWithin); err != nil {
		t.Fatalf("Wait after a grant and a release made between two Waits: %v", err)
	}
	// The same with the directory never empty (the reaper's deletion of it
	// cannot stand in for the change): a hand-over from one holder to a
	// waiter.
	a := grant("a grant")
	waiter := locker(t, h)
	got := make(chan *distlock.Lease, 1)
	go func() {
		ls, err := waiter.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	waitFor(t, "the waiter to queue", func() bool { return len(children(t, h.admin, key)) == 2 })
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if err := waitResult(sub, noticeWithin); err != nil {
		t.Fatalf("Wait after a hand-over made between two Waits: %v", err)
	}
	if next != nil {
		release(next, "the release after the hand-over")
	}
}

// testWatchSessionEvents expires the watching Locker's session, then cuts
// its connection and makes a grant while it is away: the Watch must carry
// on in the new session without waking for the expiry (the holder did not
// change), and report the grant made while it reconnected (go-zookeeper
// sets its watches again on the new connection).
func testWatchSessionEvents(t *testing.T, h *zkHarness) {
	holderL, l := locker(t, h), locker(t, h)
	b := backendOf(t, l)
	ctx := ctxFor(t, 60*time.Second)
	key := "watch-session-" + t.Name()
	ls, err := holderL.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := b.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// An anchor lock lets the harness find and expire the watcher's session.
	anchor, err := l.TryAcquire(ctx, "anchor-"+t.Name(), distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sid := b.sessionID()
	waits := make(chan error, 1)
	go func() { waits <- waitResult(sub, 30*time.Second) }()
	fires := b.dirWatchFires.Load()
	if err := h.forceExpire(ctx, anchor.Key()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the expiry to fire the watch", func() bool { return b.dirWatchFires.Load() > fires })
	select {
	case err := <-waits:
		t.Fatalf("Wait returned %v for the watcher's session expiry, the holder unchanged", err)
	case <-time.After(quietFor):
	}
	if b.sessionID() == sid {
		t.Fatal("the watcher's session did not change")
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waits:
		if err != nil {
			t.Fatalf("Wait after the expiry and a release: %v", err)
		}
	case <-time.After(noticeWithin):
		t.Fatal("Wait did not return for a release after its session expired")
	}

	h.mu.Lock()
	r := h.relays[l]
	h.mu.Unlock()
	release := r.holdNew()
	defer release()
	r.sever()
	waitFor(t, "the watcher to notice the disconnection", func() bool { return b.conn.Load().State() != zk.StateHasSession })
	ls, err = holderL.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := waitResult(sub, noticeWithin); err != nil {
		t.Fatalf("Wait after a grant made while the watcher reconnected: %v", err)
	}
	ls.Release(ctx)
}

// watchCount returns the server's total number of watches (wchs).
func watchCount(t *testing.T, addr string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "wchs"); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	_, n, ok := strings.Cut(string(out), "Total watches:")
	if !ok {
		t.Fatalf("wchs: %q", out)
	}
	total, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil {
		t.Fatalf("wchs: %q", out)
	}
	return total
}

// testWatchCloseLeavesLittle opens and closes Watch many times on a quiet
// key: the subscriptions share one directory watch (one read in all), no
// goroutine stays, and the one server watch left goes at the key's next
// change.
func testWatchCloseLeavesLittle(t *testing.T, h *zkHarness) {
	const cycles = 50
	other, l := locker(t, h), locker(t, h)
	b := backendOf(t, l)
	ctx := ctxFor(t, 30*time.Second)
	key := "watch-close-" + t.Name()
	ls, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the Lockers' own goroutines settle
	g0, w0, reads0 := goroutines(), watchCount(t, h.srv.Addr()), b.dirWatchReads.Load()
	var wg sync.WaitGroup
	for i := range cycles {
		wg.Add(1)
		go func() { // some concurrently, some one after another
			defer wg.Done()
			sub, err := b.Watch(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			if err := waitResult(sub, time.Duration(i%3)*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Wait on a quiet key: %v", err)
			}
			sub.Close()
		}()
		if i%2 == 0 {
			wg.Wait()
		}
	}
	wg.Wait()
	if n := b.dirWatchReads.Load() - reads0; n != 1 {
		t.Errorf("%d Watch calls on one quiet key read its directory %d times, want once (a shared watch)", cycles, n)
	}
	if n := watchCount(t, h.srv.Addr()) - w0; n > 1 {
		t.Errorf("%d more server watches after %d closed Watch calls, want at most 1", n, cycles)
	}
	waitFor(t, "the goroutines to end", func() bool { return goroutines() <= g0 })
	b.hub.mu.Lock()
	left := len(b.hub.dirs)
	b.hub.mu.Unlock()
	if left > 1 {
		t.Errorf("the hub keeps %d watches for one key", left)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change to clear the watch left behind", func() bool { return watchCount(t, h.srv.Addr()) <= w0 })
}

// flakyLink forwards loopback TCP connections to a server and can refuse
// them for a while: with its listener closed every dial fails, so
// go-zookeeper goes round its server list again and again, failing the
// requests queued meanwhile (ErrNoServer) at each round.
type flakyLink struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
}

func newFlakyLink(t *testing.T, target string) *flakyLink {
	f := &flakyLink{addr: "127.0.0.1:0", target: target, conns: map[net.Conn]struct{}{}}
	f.up(t)
	f.addr = f.ln.Addr().String()
	t.Cleanup(f.down)
	return f
}

func (f *flakyLink) up(t *testing.T) {
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns[c], f.conns[s] = struct{}{}, struct{}{}
			f.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
}

func (f *flakyLink) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ln.Close()
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
}

// testWatchRearmWhileDown has Wait read its directory again while the
// connection is down and go-zookeeper keeps failing its requests: Wait
// must try again rather than fail, and return for the change once the
// connection is back (in the same session).
func testWatchRearmWhileDown(t *testing.T, h *zkHarness) {
	holderL := locker(t, h)
	f := newFlakyLink(t, h.srv.Addr())
	ctx := ctxFor(t, 60*time.Second)
	db, err := dialBackend(ctx, []string{f.addr}, []driver.Option{WithSessionTimeout(10 * time.Second).DriverOption()})
	if err != nil {
		t.Fatal(err)
	}
	b := db.(*backend)
	t.Cleanup(func() { b.Close() })
	key := "watch-down-" + t.Name()
	ls, err := holderL.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := b.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the watch fires; no Wait runs to see it
	sid := b.sessionID()
	f.down()
	waitFor(t, "the watcher to notice the link down", func() bool { return b.conn.Load().State() != zk.StateHasSession })
	waits := make(chan error, 1)
	go func() { waits <- waitResult(sub, 30*time.Second) }()
	select {
	case err := <-waits:
		t.Fatalf("Wait returned %v while the connection was down", err)
	case <-time.After(2500 * time.Millisecond): // two rounds of go-zookeeper's reconnection
	}
	f.up(t)
	select {
	case err := <-waits:
		if err != nil {
			t.Fatalf("Wait after the connection came back: %v", err)
		}
	case <-time.After(noticeWithin):
		t.Fatal("Wait did not return for a release once the connection came back")
	}
	if b.sessionID() != sid {
		t.Errorf("the session changed (%#x to %#x): the test meant to stay in one", sid, b.sessionID())
	}
}
