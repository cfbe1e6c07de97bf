package zookeeper

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testserver"
)

// TestKeySpace checks that the znodes the backend leaves on the server do
// not grow with the number of distinct keys: key directories are
// containers, which the server reaps once their last lock znode is gone,
// and a directory the backend created but never put a lock znode in (which
// the server never reaps) is deleted by the backend.
func TestKeySpace(t *testing.T) {
	srv := testserver.ZooKeeper(t, testserver.WithZKContainerReaper(100*time.Millisecond, 0))
	h := newHarness(t, srv)
	t.Run("CancelledCreateLeavesNoDirectory", func(t *testing.T) { testCancelledCreateLeavesNoDirectory(t, h) })
	t.Run("LostCreateLeavesNoDirectory", func(t *testing.T) { testLostCreateLeavesNoDirectory(t, h) })
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
