package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// Subtests of TestStandalone about renewal: batches, watches, and what a
// watch cannot see.

// batchLocker is a Locker dialled through its own relay with nothing
// between it and the backend, so that the renewer batches (the harness's
// crash wrapper refreshes one by one).
func batchLocker(t *testing.T, h *zkHarness, opts ...distlock.Option) (distlock.Locker, *backend, *relay) {
	t.Helper()
	r := newRelay(t, h.srv.Addr(), &h.book)
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	db, err := dialBackend(ctxFor(t, 20*time.Second), []string{r.addr()}, append([]driver.Option{WithSessionTimeout(sessionTimeout).DriverOption()}, backendOpts...))
	if err != nil {
		t.Fatal(err)
	}
	l, err := distlock.New(db, lockerOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, db.(*backend), r
}

func goroutines() int {
	n, _ := testutil.Goroutines("github.com/distlock/distlock", "github.com/go-zookeeper/zk")
	return n
}

func acquireMany(t *testing.T, ctx context.Context, l distlock.Locker, prefix string, from, to int, ttl time.Duration) []*distlock.Lease {
	t.Helper()
	var leases []*distlock.Lease
	for i := from; i < to; i++ {
		ls, err := l.TryAcquire(ctx, fmt.Sprintf("%s-%d", prefix, i), distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		leases = append(leases, ls)
	}
	return leases
}

// watched reports whether every znode of leases is held with its watch
// trusted on the current connection.
func watched(b *backend, leases ...*distlock.Lease) bool {
	b.sess.mu.Lock()
	defer b.sess.mu.Unlock()
	for _, ls := range leases {
		var nd Node
		ls.As(&nd)
		n := b.sess.held[nd.Path]
		if n == nil || !n.armed || n.gone || n.checked != b.sess.conns {
			return false
		}
	}
	return true
}

func goneFlag(b *backend, path string) bool {
	b.sess.mu.Lock()
	defer b.sess.mu.Unlock()
	n := b.sess.held[path]
	return n == nil || n.gone
}

// testManyLeasesRenewed holds 500 auto-renewing leases for several renew
// intervals: all stay held, no goroutine is added per lease, and once their
// watches are set a batch costs one read, not one per lease.
func testManyLeasesRenewed(t *testing.T, h *zkHarness) {
	const n, few = 500, 10
	const ttl = 2 * time.Second // renewed every ttl/3
	l, b, _ := batchLocker(t, h)
	ctx := ctxFor(t, 2*time.Minute)
	key := "many-" + t.Name()

	leases := acquireMany(t, ctx, l, key, 0, few, ttl)
	time.Sleep(ttl / 2)
	base := goroutines()
	leases = append(leases, acquireMany(t, ctx, l, key, few, n, ttl)...)
	waitFor(t, "every lease's watch to be set", func() bool { return watched(b, leases...) })
	if d := goroutines() - base; d > 8 {
		t.Errorf("%d goroutines more with %d leases than with %d", d, n, few)
	}

	reads0 := b.refreshReads.Load()
	for i := 0; i < 6; i++ { // several renew intervals
		time.Sleep(ttl / 4)
		if d := goroutines() - base; d > 8 {
			_, dump := testutil.Goroutines("github.com/distlock/distlock", "github.com/go-zookeeper/zk")
			t.Fatalf("%d goroutines more with %d leases than with %d:\n%s", d, n, few, dump)
		}
	}
	reads := b.refreshReads.Load() - reads0
	for i, ls := range leases {
		if err := ls.Err(); err != nil {
			t.Fatalf("lease %d lost while renewing: %v", i, err)
		}
	}
	// 3 s is 4.5 renew intervals: n leases were renewed over 2,000 times.
	t.Logf("%d leases, %v: %d znode reads", n, 6*ttl/4, reads)
	if reads > n/5 {
		t.Errorf("%d znode reads in %v for %d leases: renewal is not batched", reads, 6*ttl/4, n)
	}
	for _, ls := range leases {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b.sess.mu.Lock()
	left := len(b.sess.held)
	b.sess.mu.Unlock()
	if left != 0 {
		t.Errorf("%d znodes still tracked after every release", left)
	}
}

// testDeletedZnodeReported deletes a held lock znode from another session:
// the watch reports it at once, the lease ends lost within a renew interval
// and a Refresh says ErrNotHeld; the other leases stay held.
func testDeletedZnodeReported(t *testing.T, h *zkHarness) {
	const ttl = 3 * time.Second
	l, b, _ := batchLocker(t, h)
	ctx := ctxFor(t, time.Minute)
	key := "deleted-" + t.Name()
	leases := acquireMany(t, ctx, l, key, 0, 20, ttl)
	plain, err := l.TryAcquire(ctx, key+"-plain", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watches to be set", func() bool { return watched(b, leases...) })
	if err := plain.Refresh(ctx); err != nil {
		t.Fatal(err)
	}

	victim := leases[7]
	var nd, pn Node
	victim.As(&nd)
	plain.As(&pn)
	start := time.Now()
	for _, p := range []string{nd.Path, pn.Path} {
		if err := h.admin.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the deletion event", func() bool { return goneFlag(b, nd.Path) })
	if d := time.Since(start); d > time.Second {
		t.Errorf("deletion seen after %v", d)
	}
	if err := plain.Refresh(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Refresh of a deleted znode: %v, want ErrNotHeld", err)
	}
	select {
	case <-victim.Done():
	case <-time.After(ttl/3 + time.Second):
		t.Fatalf("lease of a deleted znode still held after %v", time.Since(start))
	}
	took := time.Since(start)
	if !errors.Is(victim.Err(), distlock.ErrLeaseLost) {
		t.Errorf("lease ended with %v, want ErrLeaseLost", victim.Err())
	}
	t.Logf("loss reported %v after the deletion (renew interval %v)", took, ttl/3)
	time.Sleep(ttl / 2)
	for i, ls := range leases {
		if ls != victim && ls.Err() != nil {
			t.Errorf("lease %d lost with another's znode: %v", i, ls.Err())
		}
	}
	for _, ls := range leases {
		ls.Release(ctx)
	}
}

// testDataSetThenDeleted sets data on a held znode, which fires its watch
// without deleting it: the lease stays held, its next refresh sets a new
// watch, and a later deletion is still reported through it.
func testDataSetThenDeleted(t *testing.T, h *zkHarness) {
	const ttl = 2 * time.Second
	l, b, _ := batchLocker(t, h)
	ctx := ctxFor(t, time.Minute)
	leases := acquireMany(t, ctx, l, "data-"+t.Name(), 0, 3, ttl)
	waitFor(t, "the watches to be set", func() bool { return watched(b, leases...) })
	var nd Node
	leases[1].As(&nd)
	if _, err := h.admin.Set(nd.Path, []byte("admin"), -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the data event", func() bool { return !watched(b, leases[1]) })
	waitFor(t, "a new watch", func() bool { return watched(b, leases[1]) })
	if err := leases[1].Err(); err != nil {
		t.Fatalf("lease lost by a data change: %v", err)
	}
	if err := h.admin.Delete(nd.Path, -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion event", func() bool { return goneFlag(b, nd.Path) })
	select {
	case <-leases[1].Done():
	case <-time.After(ttl/3 + time.Second):
		t.Fatal("lease of a deleted znode still held")
	}
	if leases[0].Err() != nil || leases[2].Err() != nil {
		t.Fatalf("other leases lost: %v, %v", leases[0].Err(), leases[2].Err())
	}
	leases[0].Release(ctx)
	leases[2].Release(ctx)
}

// testDeletedWhileDisconnected deletes a held znode while its client is
// away (reconnecting within the grace, in the same session): no event
// comes on the old connection, and the relay drops go-zookeeper's
// SetWatches on the new one (which would have the server send the event
// again, but maybe after the replies a refresh waits for), so the refresh
// after the reconnection must read the znodes again and report the
// deleted one.
func testDeletedWhileDisconnected(t *testing.T, h *zkHarness) {
	// go-zookeeper waits a second before it reconnects to a lone server:
	// the grace (a quarter of the session timeout) must be longer.
	const ttl = 3 * time.Second
	l, b, r := batchLocker(t, h, WithSessionTimeout(6*time.Second))
	ctx := ctxFor(t, time.Minute)
	leases := acquireMany(t, ctx, l, "away-"+t.Name(), 0, 10, ttl)
	waitFor(t, "the watches to be set", func() bool { return watched(b, leases...) })
	sid := b.sessionID()
	victim := leases[3]
	var nd Node
	victim.As(&nd)

	// The server is not to send the deletion again on the new connection
	// (go-zookeeper's SetWatches): the refresh must find it by itself.
	r.setNoSetWatches(true)
	release := r.holdNew()
	r.sever()
	if err := h.admin.Delete(nd.Path, -1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	release()

	select {
	case <-victim.Done():
	case <-time.After(2 * ttl):
		t.Fatal("lease whose znode was deleted during a disconnection still held")
	}
	if b.sessionID() != sid {
		t.Fatalf("session changed from %#x to %#x", sid, b.sessionID())
	}
	waitFor(t, "the other watches to be set on the new connection", func() bool {
		return watched(b, append(append([]*distlock.Lease(nil), leases[:3]...), leases[4:]...)...)
	})
	for i, ls := range leases {
		if ls != victim && ls.Err() != nil {
			t.Errorf("lease %d lost across a reconnection within the grace: %v", i, ls.Err())
		}
	}
	for _, ls := range leases {
		ls.Release(ctx)
	}
}

// testNewRefreshBatch: with New the events may come late (WithEvents
// drains them on a goroutine of its own), so a refresh reads every znode,
// pipelined; a deleted znode is still reported.
func testNewRefreshBatch(t *testing.T, srv *testserver.Server) {
	const n, ttl = 50, 2 * time.Second
	conn, events, err := zk.Connect([]string{srv.Addr()}, sessionTimeout, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	nb, err := NewBackend(conn, WithEvents(events), WithSessionTimeout(sessionTimeout))
	if err != nil {
		t.Fatal(err)
	}
	l, err := distlock.New(nb)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := nb.(*backend)
	if b.watches {
		t.Fatal("New trusts watches")
	}
	ctx := ctxFor(t, time.Minute)
	leases := acquireMany(t, ctx, l, "new-"+t.Name(), 0, n, ttl)
	reads0 := b.refreshReads.Load()
	time.Sleep(ttl / 2) // at least one renew interval
	if reads := b.refreshReads.Load() - reads0; reads < n {
		t.Errorf("%d znode reads in %v for %d leases: New must read each znode", reads, ttl/2, n)
	}
	var nd Node
	leases[5].As(&nd)
	if err := conn.Delete(nd.Path, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leases[5].Done():
	case <-time.After(ttl/3 + time.Second):
		t.Fatal("lease of a deleted znode still held")
	}
	for i, ls := range leases {
		if i != 5 && ls.Err() != nil {
			t.Errorf("lease %d lost: %v", i, ls.Err())
		}
	}
	for _, ls := range leases {
		ls.Release(ctx)
	}
}
