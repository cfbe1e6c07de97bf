package zookeeper

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// TestLossNoticeClampedTimeout cuts a holder off silently from a server
// that grants a shorter session timeout than the client asked for
// (maxSessionTimeout 3 s, asked 12 s): the server expires the session on
// the granted timeout, so the holder's lease must report its loss before
// then, and so before the waiter in another client is granted the lock.
// (A grace of a quarter of the asked timeout would leave the old lease open
// for two seconds beside the new one.)
func TestLossNoticeClampedTimeout(t *testing.T) {
	const asked, granted = 12 * time.Second, 3 * time.Second
	srv := testserver.ZooKeeper(t, testserver.WithZKMaxSessionTimeout(granted))
	admin := adminConn(t, srv.Addr())
	var book sessionBook
	ra := newRelay(t, srv.Addr(), &book)
	ctx := ctxFor(t, 30*time.Second)

	a, err := Dial(ctx, []string{ra.addr()}, WithSessionTimeout(asked))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := Dial(ctx, []string{srv.Addr()}, WithSessionTimeout(asked))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	const key = "clamped"
	held, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lostAt := make(chan time.Time, 1)
	go func() {
		select {
		case <-held.Done():
			lostAt <- time.Now()
		case <-ctx.Done():
		}
	}()
	type grant struct {
		lease *distlock.Lease
		at    time.Time
		err   error
	}
	got := make(chan grant, 1)
	go func() {
		l, err := b.Acquire(ctx, key, distlock.WithTTL(time.Minute))
		got <- grant{l, time.Now(), err}
	}()
	waitFor(t, "the waiter to queue", func() bool { return len(children(t, admin, key)) == 2 })

	cut := time.Now()
	ra.setBlackhole(true)
	var g grant
	select {
	case g = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter was not granted the lock after the holder was cut off")
	}
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer g.lease.Release(ctx)
	// Ordering, read at the grant: Done must be closed by now.
	select {
	case <-held.Done():
	default:
		t.Fatalf("the waiter was granted the lock %v after the cut while the cut-off holder's lease was still open",
			g.at.Sub(cut).Round(time.Millisecond))
	}
	lost := <-lostAt
	if !lost.Before(g.at) {
		t.Fatalf("the holder's lease reported its loss %v after the cut, the waiter was granted the lock %v after it",
			lost.Sub(cut).Round(time.Millisecond), g.at.Sub(cut).Round(time.Millisecond))
	}
	t.Logf("cut off; loss reported after %v, the lock granted to the waiter after %v",
		lost.Sub(cut).Round(time.Millisecond), g.at.Sub(cut).Round(time.Millisecond))
	if g.lease.Token() <= held.Token() {
		t.Fatalf("token %d after %d", g.lease.Token(), held.Token())
	}
}

// TestGrantedTimeout checks how the grace follows the session timeout the
// server granted rather than the one asked for, and that a silent link
// past the silence bound ends the leases but not the Locker.
func TestGrantedTimeout(t *testing.T) {
	const asked, granted = 12 * time.Second, 3 * time.Second
	srv := testserver.ZooKeeper(t, testserver.WithZKMaxSessionTimeout(granted))
	admin := adminConn(t, srv.Addr())

	t.Run("DefaultGrace", func(t *testing.T) {
		l, err := Dial(ctxFor(t, 20*time.Second), []string{srv.Addr()}, WithSessionTimeout(asked))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		b := backendOf(t, l)
		if got := b.link.granted(); got != granted {
			t.Fatalf("granted timeout %v, want %v", got, granted)
		}
		if got := b.disconnectGrace(); got != granted/4 {
			t.Fatalf("default grace %v, want %v", got, granted/4)
		}
	})

	t.Run("GraceRefused", func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		// 2 s is below the asked timeout's bound, not the granted one's.
		if l, err := Dial(ctx, []string{srv.Addr()}, WithSessionTimeout(asked), WithDisconnectGrace(2*time.Second)); !errors.Is(err, distlock.ErrInvalidOption) {
			if l != nil {
				l.Close()
			}
			t.Fatalf("Dial with a grace of 2/3 of the granted timeout: %v", err)
		}
		l, err := Dial(ctx, []string{srv.Addr()}, WithSessionTimeout(asked), WithDisconnectGrace(time.Second))
		if err != nil {
			t.Fatalf("Dial with a grace below 2/3 of the granted timeout: %v", err)
		}
		l.Close()
		// A dialer of the caller's hides the connection: no grace then.
		own := WithConnOptions(zk.WithDialer(net.DialTimeout))
		if l, err := Dial(ctx, []string{srv.Addr()}, own, WithDisconnectGrace(100*time.Millisecond)); !errors.Is(err, distlock.ErrInvalidOption) {
			if l != nil {
				l.Close()
			}
			t.Fatalf("Dial with its own dialer and a grace: %v", err)
		}
		l, err = Dial(ctx, []string{srv.Addr()}, own)
		if err != nil {
			t.Fatal(err)
		}
		if g := backendOf(t, l).disconnectGrace(); g != 0 {
			t.Errorf("grace %v with a dialer of the caller's, want 0", g)
		}
		l.Close()

		conn, events, err := zk.Connect([]string{srv.Addr()}, granted, zk.WithLogger(nopLogger{}))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := New(conn, WithEvents(events), WithDisconnectGrace(100*time.Millisecond)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("New with a grace and no session timeout: %v", err)
		}
		if _, err := New(conn, WithEvents(events), WithSessionTimeout(granted), WithDisconnectGrace(granted/3)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("New with a grace of a third of the session timeout: %v", err)
		}
		l, err = New(conn, WithEvents(events), WithSessionTimeout(granted), WithDisconnectGrace(granted/6))
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	})

	t.Run("SilenceThenBack", func(t *testing.T) {
		var book sessionBook
		r := newRelay(t, srv.Addr(), &book)
		ctx := ctxFor(t, 30*time.Second)
		l, err := Dial(ctx, []string{r.addr()}, WithSessionTimeout(asked))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		const key = "silence"
		lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		r.setBlackhole(true)
		select {
		case <-lease.Done():
		case <-ctx.Done():
			t.Fatal("lease not reported lost on a silent link")
		}
		if !errors.Is(lease.Err(), distlock.ErrLeaseLost) {
			t.Fatalf("Err() = %v, want ErrLeaseLost", lease.Err())
		}
		// The connect request of a reconnection went nowhere: let the
		// client try again on an open link.
		r.setBlackhole(false)
		r.sever()
		waitFor(t, "the lost lease's znode to go", func() bool { return len(children(t, admin, key)) == 0 })
		var again *distlock.Lease
		waitFor(t, "the Locker to take the key again", func() bool {
			again, err = l.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
			return err == nil
		})
		if again.Token() <= lease.Token() {
			t.Fatalf("token %d after %d", again.Token(), lease.Token())
		}
		again.Release(ctx)
	})
}

// TestLossNoticeCreationTimeout: the server stores each session's timeout
// when it creates the session, and a restarted server (or a new leader)
// restores the session with that one, not with the larger timeout a later
// connection was granted (go-zookeeper asks each reconnection for the
// timeout granted last, so a later grant is only larger when the server's
// minSessionTimeout went up). The loss notice must follow the smaller one,
// and go-zookeeper must ping often enough for it.
//
// A dials asking 3 s: its session is created with 3 s. The operator raises
// minSessionTimeout to 12 s and restarts the server; A comes back in the
// same session, granted 12 s. A takes the lock, and keeps it on an idle,
// healthy link for twice the smaller timeout. B queues. A is cut off
// silently (no FIN), and the server restarts once more: it restores A's
// session with 3 s and expires it about 3 s after it is up, then grants B
// the lock. A's lease must have reported its loss before that. (A link
// that kept only the newest grant would close A's Done only 8 s, two
// thirds of 12 s, after the cut.)
func TestLossNoticeCreationTimeout(t *testing.T) {
	const small, large = 3 * time.Second, 12 * time.Second
	srv := testserver.ZooKeeper(t)
	ctx := ctxFor(t, 60*time.Second)
	p := newPartition(t, srv.Addr())

	a, err := Dial(ctx, []string{p.addr()}, WithSessionTimeout(small))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ab := backendOf(t, a)
	if g := ab.link.granted(); g != small {
		t.Fatalf("granted %v, want %v", g, small)
	}
	sid := ab.sessionID()

	setZKConf(t, srv, "minSessionTimeout", large)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A to be back with the larger grant", func() bool {
		return ab.conn.Load().State() == zk.StateHasSession && ab.link.latestGrant() == large
	})
	if got := ab.sessionID(); got != sid {
		// The restored session expired before A was back (3 s): nothing
		// to test. go-zookeeper retries within about a second.
		t.Skipf("A's session did not survive the first restart (%#x, now %#x)", sid, got)
	}
	// Errors, not fatal: the takeover below is what counts.
	if g := ab.link.granted(); g != small {
		t.Errorf("granted %v after a grant of %v in a session created with %v: want the smaller", g, large, small)
	}
	if g := ab.disconnectGrace(); g != small/4 {
		t.Errorf("default grace %v, want %v", g, small/4)
	}

	b, err := Dial(ctx, []string{srv.Addr()}, WithSessionTimeout(large))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	admin := adminConn(t, srv.Addr())

	const key = "creation-timeout"
	held, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// go-zookeeper pings every third of the timeout it was handed: of the
	// larger one (4 s), the silence bound of the smaller one (2 s) would
	// end an idle lease on a healthy link.
	time.Sleep(2 * small)
	select {
	case <-held.Done():
		t.Fatalf("an idle lease on a healthy link was reported lost: %v", held.Err())
	default:
	}
	lost := lossTimes(ctx, []*distlock.Lease{held})
	got := acquireAsync(ctx, b, key)
	waitFor(t, "B to queue", func() bool { return len(children(t, admin, key)) == 2 })
	if err := held.Refresh(ctx); err != nil { // the server heard from A just now
		t.Fatal(err)
	}

	fault := time.Now()
	p.set(true, true)
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	checkNoticeFirst(t, ctx, fault, []*distlock.Lease{held}, lost, got)
}
