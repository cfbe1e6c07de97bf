package zookeeper

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// The key space test's size and the reaper's settings, for measuring by
// hand, e.g. go test -run TestKeySpace/ManyKeys ./zookeeper/ -args -zk.keys=100000
var (
	keySpaceKeys     = flag.Int("zk.keys", 2000, "TestKeySpace: distinct keys locked once each")
	keySpaceInterval = flag.Duration("zk.reap-interval", 100*time.Millisecond, "TestKeySpace: the server's znode.container.checkIntervalMs")
	keySpaceRate     = flag.Int("zk.reap-rate", 600000, "TestKeySpace: the server's znode.container.maxPerMinute")
)

// TestKeySpace checks that the znodes the backend leaves on the server do
// not grow with the number of distinct keys: key directories are
// containers, which the server reaps once their last lock znode is gone,
// and a directory the backend created but never put a lock znode in (which
// the server never reaps) is deleted by the backend.
func TestKeySpace(t *testing.T) {
	srv := testserver.ZooKeeper(t, testserver.WithZKContainerReaper(*keySpaceInterval, *keySpaceRate))
	h := newHarness(t, srv)
	// First: it counts every znode on the server.
	t.Run("ManyKeysReaped", func(t *testing.T) { testManyKeysReaped(t, srv) })
	t.Run("CancelledCreateLeavesNoDirectory", func(t *testing.T) { testCancelledCreateLeavesNoDirectory(t, h) })
	t.Run("LostCreateLeavesNoDirectory", func(t *testing.T) { testLostCreateLeavesNoDirectory(t, h) })
}

// testManyKeysReaped locks N distinct keys once each, then waits for the
// reaper: the server must be left with the znodes it had before plus the
// base path's two persistent znodes, and a key locked again after its
// directory was reaped must get a larger token than it had.
func testManyKeysReaped(t *testing.T, srv *testserver.Server) {
	const base = "/distlock-keyspace/locks" // two persistent znodes
	n := *keySpaceKeys
	admin := adminConn(t, srv.Addr())
	before := znodeCount(t, srv.Addr())
	// The reaper deletes at most rate a minute, one pass every interval.
	reapBound := 2*(*keySpaceInterval+time.Duration(n)*time.Minute/time.Duration(*keySpaceRate)) + 30*time.Second
	ctx := ctxFor(t, time.Minute+time.Duration(n)*10*time.Millisecond+reapBound)
	l, err := Dial(ctx, []string{srv.Addr()}, WithBasePath(base))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	key := func(i int) string { return fmt.Sprintf("key-%06d", i) }

	tokens := make([]distlock.Token, n)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				lease, err := l.TryAcquire(ctx, key(i))
				if err == nil {
					tokens[i] = lease.Token()
					err = lease.Release(ctx)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("key %d: %w", i, err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	locked := time.Since(start)
	left := numChildren(t, admin, base)
	t.Logf("%d keys locked and released once each in %v (%.0f/s); right after: %d key directories, %d znodes on the server (%d before)",
		n, locked.Round(time.Millisecond), float64(n)/locked.Seconds(), left, znodeCount(t, srv.Addr()), before)

	start = time.Now()
	for numChildren(t, admin, base) > 0 {
		if time.Since(start) > reapBound {
			t.Fatalf("%d key directories left %v after the last release", numChildren(t, admin, base), reapBound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := znodeCount(t, srv.Addr())
	t.Logf("all key directories reaped %v after the last release; %d znodes on the server", time.Since(start).Round(time.Millisecond), after)
	if after > before+2 {
		t.Fatalf("%d znodes on the server after reaping, want at most %d: %d before and the base path's 2", after, before+2, before)
	}

	for _, i := range []int{0, n / 2, n - 1} {
		lease, err := l.TryAcquire(ctx, key(i))
		if err != nil {
			t.Fatal(err)
		}
		if lease.Token() <= tokens[i] {
			t.Errorf("key %d: token %d after its directory was reaped, %d before", i, lease.Token(), tokens[i])
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// testCancelledCreateLeavesNoDirectory ends an acquire's context between
// the creation of the key directory and that of its lock znode. The server
// never reaps a container that never had a child, so the backend must
// delete the directory.
func testCancelledCreateLeavesNoDirectory(t *testing.T, h *zkHarness) {
	const base = "/distlock-keyspace/cancelled"
	l := locker(t, h, WithBasePath(base))
	b := backendOf(t, l)
	key := "cancelled-" + t.Name()
	dir := base + "/" + escapeKey(key)
	ctx, cancel := context.WithCancel(ctxFor(t, 20*time.Second))
	b.afterDir = cancel
	_, err := l.TryAcquire(ctx, key)
	b.afterDir = nil
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire cancelled after the key directory was created: %v, want context.Canceled", err)
	}
	waitFor(t, "the never-used key directory to be deleted", func() bool {
		ok, _, err := h.admin.Exists(dir)
		return err == nil && !ok
	})
	// The key works as before.
	lease, err := l.TryAcquire(ctxFor(t, 20*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(context.Background())
}

// testLostCreateLeavesNoDirectory loses the create of the lock znode on
// the way to the server, after the key directory was created, and drops
// the connection: the create's outcome is unknown to the backend, and
// the directory it left never had a child.
func testLostCreateLeavesNoDirectory(t *testing.T, h *zkHarness) {
	const base = "/distlock-keyspace/lost"
	l := locker(t, h, WithBasePath(base))
	b := backendOf(t, l)
	h.mu.Lock()
	r := h.relays[l]
	h.mu.Unlock()
	key := "lost-" + t.Name()
	dir := base + "/" + escapeKey(key)
	var wg sync.WaitGroup
	defer wg.Wait()
	b.afterDir = func() {
		r.setBlackhole(true) // the create is dropped
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(300 * time.Millisecond)
			r.setBlackhole(false)
			r.sever()
		}()
	}
	_, err := l.TryAcquire(ctxFor(t, 20*time.Second), key)
	b.afterDir = nil
	if err == nil {
		t.Fatal("TryAcquire succeeded though its create never reached the server")
	}
	t.Logf("TryAcquire whose create was lost: %v", err)
	waitFor(t, "the never-used key directory to be deleted", func() bool {
		ok, _, err := h.admin.Exists(dir)
		return err == nil && !ok
	})
}

// numChildren counts the znodes directly under path.
func numChildren(t *testing.T, admin *zk.Conn, path string) int {
	t.Helper()
	ok, st, err := admin.Exists(path)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return 0
	}
	return int(st.NumChildren)
}

// znodeCount is the server's count of all its znodes (mntr's
// zk_znode_count), the system znodes under /zookeeper included.
func znodeCount(t *testing.T, addr string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "mntr"); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "zk_znode_count\t"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("mntr: no zk_znode_count (%v)", sc.Err())
	return 0
}
