package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// TestEnsemble runs the server-fault cases on a real 3-server ensemble.
func TestEnsemble(t *testing.T) {
	cl := testserver.ZooKeeperEnsemble(t, 3)
	t.Run("KillFollower", func(t *testing.T) { testKillFollower(t, cl) })
	t.Run("PauseHolderServer", func(t *testing.T) { testPauseHolderServer(t, cl) })
	t.Run("KillLeader", func(t *testing.T) { testKillLeader(t, cl) })
	t.Run("WatchOnFollower", func(t *testing.T) { testWatchOnFollower(t, cl) })
}

func dial(t *testing.T, servers []string, timeout time.Duration) distlock.Locker {
	t.Helper()
	l, err := Dial(ctxFor(t, 30*time.Second), servers, WithSessionTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func memberOf(t *testing.T, cl *testserver.Cluster, l distlock.Locker) int {
	t.Helper()
	var conn *zk.Conn
	if !distlock.As(l, &conn) {
		t.Fatal("no *zk.Conn")
	}
	for i, m := range cl.Members {
		if m.Addr() == conn.Server() {
			return i
		}
	}
	t.Fatalf("connected to %q, not a member", conn.Server())
	return -1
}

func leader(t *testing.T, cl *testserver.Cluster) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		i, err := cl.Leader()
		if err == nil {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func restart(t *testing.T, cl *testserver.Cluster) {
	t.Helper()
	if err := cl.Restart(ctxFor(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// handOver releases (or gives up) the holder's lease and checks that
// another Locker then gets the key with a larger token.
func handOver(t *testing.T, held *distlock.Lease, next distlock.Locker) {
	t.Helper()
	ctx := ctxFor(t, 60*time.Second)
	if err := held.Release(ctx); err != nil && !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatal(err)
	}
	lease, err := next.Acquire(ctx, held.Key())
	if err != nil {
		t.Fatal(err)
	}
	if lease.Token() <= held.Token() {
		t.Fatalf("token %d after %d", lease.Token(), held.Token())
	}
	lease.Release(ctx)
}

// testKillFollower kills a follower (the holder's own server if it is one)
// while a lock is held: the holder reconnects to another server within its
// session and keeps the lock; tokens keep increasing.
func testKillFollower(t *testing.T, cl *testserver.Cluster) {
	const timeout = 4 * time.Second
	holder, other := dial(t, cl.Endpoints(), timeout), dial(t, cl.Endpoints(), timeout)
	ctx := ctxFor(t, 60*time.Second)
	lease, err := holder.Acquire(ctx, "kill-follower")
	if err != nil {
		t.Fatal(err)
	}
	lead := leader(t, cl)
	victim := memberOf(t, cl, holder)
	if victim == lead {
		victim = (lead + 1) % len(cl.Members)
	}
	t.Logf("leader %d; killing follower %d (holder on %d)", lead, victim, memberOf(t, cl, holder))
	if err := cl.Members[victim].Kill(); err != nil {
		t.Fatal(err)
	}
	defer restart(t, cl)
	time.Sleep(timeout) // long enough for a lost session to have expired
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost after a follower died: %v", err)
	}
	if err := lease.Refresh(ctx); err != nil {
		t.Fatalf("refresh after a follower died: %v", err)
	}
	if _, err := other.TryAcquire(ctx, lease.Key()); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("key not held after a follower died: %v", err)
	}
	handOver(t, lease, other)
}

// testPauseHolderServer stops (SIGSTOP) the only server the holder talks
// to, past the session timeout: the leader expires the session, a waiter
// on the other servers takes the key, and the holder's lease reports the
// loss.
func testPauseHolderServer(t *testing.T, cl *testserver.Cluster) {
	const timeout = 2 * time.Second
	lead := leader(t, cl)
	f := (lead + 1) % len(cl.Members)
	var rest []string
	for i, m := range cl.Members {
		if i != f {
			rest = append(rest, m.Addr())
		}
	}
	holder := dial(t, []string{cl.Members[f].Addr()}, timeout)
	other := dial(t, rest, timeout)
	ctx := ctxFor(t, 60*time.Second)
	lease, err := holder.Acquire(ctx, "pause-holder-server")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lease, 1)
	go func() {
		l, err := other.Acquire(ctx, lease.Key())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if err := cl.Members[f].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			cl.Members[f].Resume()
		}
	}()
	select {
	case <-lease.Done():
	case <-time.After(3*timeout + 5*time.Second):
		t.Fatal("the lease did not report its loss while its server was paused")
	}
	if !errors.Is(lease.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("Err() = %v, want ErrLeaseLost", lease.Err())
	}
	next := <-got
	if next == nil {
		return
	}
	if next.Token() <= lease.Token() {
		t.Fatalf("token %d after %d", next.Token(), lease.Token())
	}
	cl.Members[f].Resume()
	resumed = true
	next.Release(ctx)
}

// testKillLeader kills the leader while a lock is held. The ensemble elects
// a new one; the holder's session survives if it reconnects within the
// disconnect grace (else its lease reports the loss and its znode is
// deleted on reconnection); either way tokens keep increasing.
func testKillLeader(t *testing.T, cl *testserver.Cluster) {
	const timeout = 10 * time.Second
	holder, other := dial(t, cl.Endpoints(), timeout), dial(t, cl.Endpoints(), timeout)
	ctx := ctxFor(t, 60*time.Second)
	lease, err := holder.Acquire(ctx, "kill-leader")
	if err != nil {
		t.Fatal(err)
	}
	lead := leader(t, cl)
	if err := cl.Members[lead].Kill(); err != nil {
		t.Fatal(err)
	}
	defer restart(t, cl)
	start := time.Now()
	newLead := leader(t, cl)
	t.Logf("killed leader %d; member %d leads after %v", lead, newLead, time.Since(start))
	// A refresh succeeds once the holder is back in its session.
	if err := lease.Refresh(ctx); err != nil {
		if !errors.Is(err, distlock.ErrLeaseLost) {
			t.Fatalf("refresh after the election: %v", err)
		}
		t.Logf("the holder's lease reported loss during the election: %v", err)
	} else if _, err := other.TryAcquire(ctx, lease.Key()); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("key not held after the election while the lease is: %v", err)
	}
	handOver(t, lease, other)
}

// testWatchOnFollower watches and inspects a key through a follower while
// its holder talks to the leader: the grant and the release are pushed
// (well within the portable layer's fallback poll), and an Inspect made
// after a notice, on the same follower, shows what the notice reported.
func testWatchOnFollower(t *testing.T, cl *testserver.Cluster) {
	const timeout = 4 * time.Second
	const pushed = 2500 * time.Millisecond // a lost notice is polled for after 5 s
	lead := leader(t, cl)
	f := (lead + 1) % len(cl.Members)
	watcher := dial(t, []string{cl.Members[f].Addr()}, timeout)
	holder := dial(t, []string{cl.Members[lead].Addr()}, timeout)
	ctx := ctxFor(t, 60*time.Second)
	const key = "watch-on-follower"
	// A poll would come no sooner than the back-off: 10 s.
	ch, err := watcher.Watch(ctx, key, distlock.WithBackoff(10*time.Second, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string, within time.Duration) distlock.Holder {
		t.Helper()
		select {
		case h, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the Watch ended", what)
			}
			return h
		case <-time.After(within):
			t.Fatalf("%s: nothing within %v", what, within)
		}
		panic("unreachable")
	}
	if h := next("the first report", 30*time.Second); h.Held {
		t.Fatalf("first report %+v, want the key free", h)
	}
	lease, err := holder.TryAcquire(ctx, key, distlock.WithValue("on-leader"))
	if err != nil {
		t.Fatal(err)
	}
	want := distlock.Holder{Held: true, Token: lease.Token(), Value: "on-leader"}
	if h := next("a grant on the leader", pushed); h != want {
		t.Fatalf("Watch on a follower reported %+v, want %+v", h, want)
	}
	if h, err := watcher.Inspect(ctx, key); err != nil || h != want {
		t.Fatalf("Inspect on the follower after the notice: %+v, %v; want %+v", h, err, want)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h := next("a release on the leader", pushed); h.Held {
		t.Fatalf("Watch on a follower reported %+v after the release, want the key free", h)
	}
}
