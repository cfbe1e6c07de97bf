package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// TestCloseGivesBackInFlightCreate closes a Locker while an Acquire's create
// is in flight (the server paused for about a second): once the server
// answers, the znode that create made must be deleted, so that another
// session can take the key and Inspect reports no holder. With New the
// caller's session stays open, so nothing but the Locker deletes it; with
// Dial, Close ends the session, which deletes it. If the server never
// answers, Close still returns within the release timeout.
func TestCloseGivesBackInFlightCreate(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	admin := adminConn(t, srv.Addr())
	other, err := Dial(ctxFor(t, 20*time.Second), []string{srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })

	t.Run("New", func(t *testing.T) {
		conn := callerConn(t, srv.Addr())
		l, err := New(conn, WithSessionTimeout(closeSession), distlock.WithReleaseTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		key := "close-new"
		closeDuringCreate(t, srv, admin, l, key, time.Second, 5*time.Second)
		// The caller's session lives on; one of its requests answered
		// means the create, sent before it, has been applied too.
		if _, _, err := conn.Exists("/"); err != nil {
			t.Fatal(err)
		}
		if c := children(t, admin, key); len(c) != 0 {
			t.Errorf("after Close returned, the key directory of the caller's live session holds %v", c)
		}
		mustBeFree(t, other, key)
	})

	t.Run("Dial", func(t *testing.T) {
		l, err := Dial(ctxFor(t, 20*time.Second), []string{srv.Addr()},
			WithSessionTimeout(closeSession), distlock.WithReleaseTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		key := "close-dial"
		closeDuringCreate(t, srv, admin, l, key, time.Second, 5*time.Second)
		// The closeSession went after the create on the same connection;
		// the server deletes the znode when it ends the session, which it
		// does once it runs again, long before the session would expire.
		waitFor(t, "the closed session's znode to be deleted", func() bool { return len(children(t, admin, key)) == 0 })
		mustBeFree(t, other, key)
	})

	t.Run("DeadServer", func(t *testing.T) {
		conn := callerConn(t, srv.Addr())
		const rt = time.Second
		l, err := New(conn, WithSessionTimeout(closeSession), distlock.WithReleaseTimeout(rt))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		// Paused for three release timeouts: Close gives up after one.
		closeDuringCreate(t, srv, admin, l, "close-dead", 3*rt, rt)
	})
}

// closeSession is the session timeout of the Lockers closed mid-create:
// long enough that a paused server neither expires them nor has the
// client drop the connection, and that a znode gone within waitFor's
// bound was deleted by the Locker, not by the session's end.
const closeSession = 20 * time.Second

// callerConn is a connection the test owns, as a New caller's is.
func callerConn(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect([]string{addr}, closeSession, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	waitFor(t, "the caller's session", func() bool { return conn.State() == zk.StateHasSession })
	return conn
}

// closeDuringCreate starts an Acquire of key on l with the server paused,
// closes l once the create has been sent, resumes the server after pause,
// and checks that the Acquire failed with ErrClosed, that Close returned
// within the release timeout rt (and a second of slack), and that l left no
// goroutine behind.
func closeDuringCreate(t *testing.T, srv *testserver.Server, admin *zk.Conn, l distlock.Locker, key string, pause, rt time.Duration) {
	t.Helper()
	const pkg = "github.com/distlock/distlock/zookeeper."
	base, _ := testutil.Goroutines(pkg)
	// The key directory exists, so that the create lands at its first try
	// (a missing one costs a failed create, then a second one).
	for _, p := range []string{DefaultBasePath, DefaultBasePath + "/" + escapeKey(key)} {
		if _, err := admin.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()
	actx := ctxFor(t, 30*time.Second)
	acquired := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(actx, key)
		if ls != nil {
			ls.Release(t.Context())
		}
		acquired <- err
	}()
	waitFor(t, "the create to be sent", func() bool {
		n, _ := testutil.Goroutines("zookeeper.(*backend).create.func")
		return n > 0
	})
	closed := make(chan time.Duration, 1)
	began := time.Now()
	go func() {
		_ = l.Close()
		closed <- time.Since(began)
	}()
	time.Sleep(pause)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	select {
	case took := <-closed:
		if took > rt+time.Second {
			t.Errorf("Close took %v; the release timeout is %v", took, rt)
		}
		t.Logf("Close returned after %v (server paused for %v)", took, pause)
	case <-time.After(rt + 10*time.Second):
		t.Fatalf("Close still blocked %v after it was called; the release timeout is %v", time.Since(began), rt)
	}
	if err := <-acquired; !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("Acquire during Close: %v, want ErrClosed", err)
	}
	testutil.CheckNoGoroutines(t, base, pkg)
}

// mustBeFree checks, from another session, that key has no holder and can
// be taken at once.
func mustBeFree(t *testing.T, other distlock.Locker, key string) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	if h, err := other.Inspect(ctx, key); err != nil || h.Held {
		t.Fatalf("Inspect from another session: %+v, %v; want no holder", h, err)
	}
	ls, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire from another session: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
