package zookeeper

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// Subtests of TestStandalone about Inspect on this backend, what the
// conformance cases cannot reach: the value as znode data, a holder gone
// between the listing and its read.

// testValueStored checks that the value is the lock znode's data, set by
// the create, and that a lock without a value stores none.
func testValueStored(t *testing.T, h *zkHarness) {
	l := locker(t, h)
	ctx := ctxFor(t, 20*time.Second)
	const v = "host-a:8080 v1.2.3"
	ls, err := l.TryAcquire(ctx, "value-"+t.Name(), distlock.WithValue(v))
	if err != nil {
		t.Fatal(err)
	}
	bare, err := l.TryAcquire(ctx, "bare-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ls   *distlock.Lease
		want string
	}{{ls, v}, {bare, ""}} {
		var n Node
		c.ls.As(&n)
		data, st, err := h.admin.Get(n.Path)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != c.want || st.DataLength != int32(len(c.want)) || st.Czxid != int64(c.ls.Token()) {
			t.Errorf("%s: data %q (%d bytes), czxid %d; want %q and the token %d", n.Path, data, st.DataLength, st.Czxid, c.want, c.ls.Token())
		}
		if st.Version != 0 {
			t.Errorf("%s: data version %d: the value must be set by the create, not by a later write", n.Path, st.Version)
		}
	}
	ls.Release(ctx)
	bare.Release(ctx)
}

// testInspectHolderGone releases the holder between Inspect's listing and
// its read: Inspect must report the next in the queue (with its own token
// and value), never the znode it found gone; with nobody next, the key
// free; and with a queue that empties under every listing, an error.
func testInspectHolderGone(t *testing.T, h *zkHarness) {
	a, w, c := locker(t, h), locker(t, h), locker(t, h)
	cb := backendOf(t, c)
	ctx := ctxFor(t, 30*time.Second)
	key := "inspect-gone-" + t.Name()
	held, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute), distlock.WithValue("old"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lease, 1)
	go func() {
		ls, err := w.Acquire(ctx, key, distlock.WithTTL(time.Minute), distlock.WithValue("new"))
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	waitFor(t, "the waiter to queue", func() bool { return len(children(t, h.admin, key)) == 2 })

	var lists int
	cb.afterList = func() {
		lists++
		if lists == 1 {
			if err := held.Release(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	hd, err := c.Inspect(ctx, key)
	cb.afterList = nil
	next := <-got
	if err != nil || next == nil {
		t.Fatalf("Inspect: %v (waiter: %v)", err, next)
	}
	if !hd.Held || hd.Token != next.Token() || hd.Value != "new" || hd.Waiters != 0 || lists != 1 {
		t.Fatalf("Inspect after the holder left under it: %+v after %d listings; want the next holder (token %d, value \"new\", no waiters) from one listing",
			hd, lists, next.Token())
	}

	lists = 0
	cb.afterList = func() {
		lists++
		if lists == 1 {
			if err := next.Release(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	hd, err = c.Inspect(ctx, key)
	cb.afterList = nil
	if err != nil || hd != (distlock.Holder{}) {
		t.Fatalf("Inspect after the only holder left under it: %+v, %v; want the key free", hd, err)
	}

	// A queue that empties under every listing: each time, a new znode
	// takes the place of the one listed.
	dir := DefaultBasePath + "/" + escapeKey(key)
	acl := zk.WorldACL(zk.PermAll)
	var prev string
	for try := 0; ; try++ { // the empty directory may be reaped under us: make it again
		prev, err = h.admin.Create(dir+"/lock-churn0-", []byte("gone"), zk.FlagEphemeral|zk.FlagSequence, acl)
		if !errors.Is(err, zk.ErrNoNode) || try == 5 {
			break
		}
		if _, err := h.admin.CreateContainer(dir, nil, zk.FlagContainer, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	lists = 0
	cb.afterList = func() {
		lists++
		p, err := h.admin.Create(dir+fmt.Sprintf("/lock-churn%d-", lists), []byte("gone"), zk.FlagEphemeral|zk.FlagSequence, acl)
		if err != nil {
			t.Error(err)
		}
		if err := h.admin.Delete(prev, -1); err != nil {
			t.Error(err)
		}
		prev = p
	}
	hd, err = c.Inspect(ctx, key)
	cb.afterList = nil
	if err == nil || lists != inspectRounds {
		t.Fatalf("Inspect of a queue emptied under each of its reads: %+v, %v after %d listings; want an error after %d", hd, err, lists, inspectRounds)
	}
	t.Logf("Inspect of a churning queue: %v", err)
	h.admin.Delete(prev, -1)
}

// TestInspectWatchDeadServer kills the only server: Inspect fails within
// its context with an error matching ErrUnavailable, as the other calls
// do, and so does a Watch started then.
func TestInspectWatchDeadServer(t *testing.T) {
	s := testserver.ZooKeeper(t)
	l, err := Dial(ctxFor(t, 20*time.Second), []string{s.Addr()}, WithSessionTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxFor(t, 20*time.Second)
	ls, err := l.TryAcquire(ctx, "dead", distlock.WithValue("v"))
	if err != nil {
		t.Fatal(err)
	}
	if h, err := l.Inspect(ctx, "dead"); err != nil || !h.Held || h.Token != ls.Token() || h.Value != "v" {
		t.Fatalf("Inspect with the server up: %+v, %v", h, err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	ictx := ctxFor(t, 3*time.Second)
	if h, err := l.Inspect(ictx, "dead"); !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Inspect with the server down: %+v, %v; want an error matching ErrUnavailable", h, err)
	}
	var b *backend
	if !distlock.As(l, &b) {
		t.Fatal("no *backend")
	}
	if sub, err := b.Watch(ictx, "other"); !errors.Is(err, distlock.ErrUnavailable) {
		if sub != nil {
			sub.Close()
		}
		t.Fatalf("Watch with the server down: %v; want an error matching ErrUnavailable", err)
	}
}
