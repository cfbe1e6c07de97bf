package zookeeper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// Subtests of TestStandalone about the session: reconnects, grace, loss, and the constructors that set it up.

// testReconnectWithinGrace severs the holder's connection; the client
// reconnects at once within the session, and the lease stays held.
func testReconnectWithinGrace(t *testing.T, h *zkHarness) {
	// With one server, go-zookeeper pauses a second before it reconnects:
	// the grace (a quarter of the session timeout) must be longer.
	const timeout = 6 * time.Second
	a, b := locker(t, h, WithSessionTimeout(timeout)), locker(t, h)
	key := "grace-" + t.Name()
	ctx := ctxFor(t, 30*time.Second)
	lease, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	r := h.relays[a]
	h.mu.Unlock()
	r.sever()
	time.Sleep(sessionTimeout) // past the grace, had the client stayed away
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost across a quick reconnection: %v", err)
	}
	if _, err := b.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("key not held after the reconnection: %v", err)
	}
	if err := lease.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// testDownPastGrace keeps the holder away past the disconnect grace but
// within the session timeout: the lease is reported lost, and when the
// client comes back in the same session its znode is deleted, freeing the
// key.
func testDownPastGrace(t *testing.T, h *zkHarness) {
	const timeout = 4 * time.Second
	a, b := locker(t, h, WithSessionTimeout(timeout)), locker(t, h)
	key := "down-" + t.Name()
	ctx := ctxFor(t, 30*time.Second)
	lease, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	sid := backendOf(t, a).sessionID()
	h.mu.Lock()
	r := h.relays[a]
	h.mu.Unlock()
	release := r.holdNew()
	r.sever()
	select {
	case <-lease.Done():
	case <-time.After(timeout):
		t.Fatal("lease not reported lost within the session timeout of a disconnection")
	}
	if !errors.Is(lease.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", lease.Err())
	}
	release()
	waitFor(t, "the key to be free again", func() bool { return len(children(t, h.admin, key)) == 0 })
	if got := backendOf(t, a).sessionID(); got != sid {
		t.Logf("session changed from %#x to %#x: it expired meanwhile", sid, got)
	}
	next, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= lease.Token() {
		t.Fatalf("token %d after %d", next.Token(), lease.Token())
	}
	next.Release(ctx)
}

// testCrashLossBeforeTakeover cuts the holder off for good: its lease must
// be reported lost before the server expires the session and a waiter
// takes the key.
func testCrashLossBeforeTakeover(t *testing.T, h *zkHarness) {
	const timeout = 3 * time.Second
	a, b := locker(t, h, WithSessionTimeout(timeout)), locker(t, h)
	key := "takeover-" + t.Name()
	ctx := ctxFor(t, 30*time.Second)
	lease, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond)
	if err := h.crash(ctx, a); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next == nil {
		return
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("a waiter took the key while the cut-off holder's lease was still open")
	}
	if next.Token() <= lease.Token() {
		t.Fatalf("token %d after %d", next.Token(), lease.Token())
	}
	next.Release(ctx)
}

func testNewWithEvents(t *testing.T, srv *testserver.Server) {
	conn, events, err := zk.Connect([]string{srv.Addr()}, sessionTimeout, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	l, err := New(conn, WithEvents(events), WithSessionTimeout(sessionTimeout), WithBasePath("/custom/base"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 20*time.Second)
	lease, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var n Node
	if !lease.As(&n) || !strings.HasPrefix(n.Path, "/custom/base/k/lock-") {
		t.Fatalf("znode %q not under the base path", n.Path)
	}
	var got *zk.Conn
	if !distlock.As(l, &got) || got != conn {
		t.Fatal("As(**zk.Conn) did not give the caller's connection")
	}
	if g := l.Guarantees(); g.Backend != "zookeeper" || !g.SessionTTL || !g.FIFO || g.Wait != distlock.WaitQueue || g.ClockDependent {
		t.Fatalf("Guarantees = %+v", g)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	// Close released the lock and left the caller's session open.
	if ok, _, err := conn.Exists(n.Path); err != nil || ok {
		t.Fatalf("lock znode after Close: exists=%v err=%v", ok, err)
	}
	if conn.State() != zk.StateHasSession {
		t.Fatalf("caller's connection state %v after Close", conn.State())
	}
}

func testOpen(t *testing.T, srv *testserver.Server) {
	ctx := ctxFor(t, 20*time.Second)
	l, err := distlock.Open(ctx, "zk://"+srv.Addr()+"/opened/locks?session_timeout=3s&ttl=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var n Node
	lease.As(&n)
	if !strings.HasPrefix(n.Path, "/opened/locks/k/") || lease.TTL() != 5*time.Second {
		t.Fatalf("path %q, TTL %v", n.Path, lease.TTL())
	}
	lease.Release(ctx)
	for _, u := range []string{
		"zk://" + srv.Addr() + "/?bogus=1",
		"zk://" + srv.Addr() + "/?session_timeout=soon",
		"zk://" + srv.Addr() + "/?session_timeout=-1s",
		"zk:///locks",
		"zk://" + srv.Addr() + "/zookeeper/x",
	} {
		if l, err := distlock.Open(ctx, u); !errors.Is(err, distlock.ErrInvalid) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open(%q) = %v, want ErrInvalid", u, err)
		}
	}
}

func testBadInput(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	if _, err := New(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := Dial(ctx, nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Dial with no servers: %v", err)
	}
	for _, p := range []string{"", "/", "rel", "/a/", "/a//b", "/a/./b", "/zookeeper", "/a\x00b"} {
		if _, err := Dial(ctx, []string{"127.0.0.1:1"}, WithBasePath(p)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("WithBasePath(%q): %v", p, err)
		}
	}
	for _, o := range []distlock.Option{WithSessionTimeout(0), WithDisconnectGrace(-1), WithEvents(nil), WithACL(nil), WithEnsembleSize(0), WithConnOptions(nil)} {
		if _, err := Dial(ctx, []string{"127.0.0.1:1"}, o); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("bad option: %v", err)
		}
	}
	// No server listens: Dial gives up when its context ends.
	dctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Dial(dctx, []string{"127.0.0.1:1"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial to a dead port: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Dial to a dead port returned after %v", d)
	}
}
