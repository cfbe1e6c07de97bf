package etcd

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
)

// Tests of a member that hangs (accepts connections, never answers).

// metric reads one of the server's gauges/counters by its exact name.
func metric(t *testing.T, addr, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatalf("no %s in %s/metrics (%v)", name, addr, sc.Err())
	return 0
}

// A loss-watch try abandoned on a hung member would pin a gRPC watch
// stream of its own: its context is the client's valCtx, it has no watcher
// left, and clientv3 closes a stream only when a watcher of it closes, so
// it would last as long as the client (two client goroutines, a server
// stream), past the member's return, the release and the Locker's Close.
// Each try of the loss watch made while a member hangs is given up before
// the member answers; none may leave a gRPC stream (client goroutines, a
// server-side watch stream) behind once the Locker and its tries are done
// (with the try number as metadata alone, every such try left one until
// the client closed).
func TestLossWatchTriesLeaveNoStreams(t *testing.T) {
	s := testserver.Etcd(t)
	ctx := ctxT(t, 90*time.Second)
	cli := newClient(t, []string{s.Addr()})
	if _, err := cli.Get(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	ours := []string{"github.com/distlock/distlock", "go.etcd.io/etcd/client/v3"}
	base, _ := testutil.Goroutines(ours...)
	serverBase := metric(t, s.Addr(), "etcd_debugging_mvcc_watch_stream_total")
	l, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	ls := tryAcquireUntil(ctx, t, l, "leak")
	time.Sleep(time.Second) // the loss watch is up

	const hang = 12 * time.Second // about three tries of silentAfter
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(hang)
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	n, _ := testutil.Goroutines(ours...)
	t.Logf("after Close: %d client/library goroutines (%d before New); server watch streams %d (%d before)",
		n, base, metric(t, s.Addr(), "etcd_debugging_mvcc_watch_stream_total"), serverBase)
	testutil.CheckNoGoroutines(t, base, ours...)
}

// Waiters with short TTLs keep their places while a follower hangs: no read
// of the wait that the balancer sends to the hung member may hold their
// renewal up, and a renewal sent there must leave time for another (with
// TTL 4s, a 5 s read in the loop that renewed the
// lease let it expire, and an unbounded one held it for the 15 s the client
// took to drop the member; with TTL 2s, a renewal try bounded by a third of
// the lease and retried a second later came after the lease had run out).
func waitersKeepPlaces(t *testing.T, c *testserver.Cluster, ttl, window time.Duration) {
	endpoints := c.Endpoints()
	ctx := ctxT(t, 3*time.Minute)
	leader, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	hung := (leader + 1) % len(endpoints)
	key := fmt.Sprintf("waiters-keep-places-%v", ttl)
	holder, err := New(newClient(t, others(endpoints, hung)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	held := tryAcquireUntil(ctx, t, holder, key)
	const waiters = 6
	type result struct {
		i   int
		err error
	}
	got := make(chan result, waiters)
	for i := range waiters {
		l := openLocker(ctx, t, endpoints) // keep-alive pings, as Open makes it
		go func() {
			_, err := l.Acquire(ctx, key, distlock.WithTTL(ttl))
			got <- result{i, err}
		}()
	}
	for {
		h, err := holder.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if h.Waiters == waiters {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Members[hung].Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	defer func() { _ = c.Members[hung].Resume() }()
	var failed []string
	deadline := time.After(window)
wait:
	for {
		select {
		case r := <-got:
			// Nobody can get the lock: the holder still has it.
			failed = append(failed, fmt.Sprintf("waiter %d, %v after the hang: %v", r.i,
				time.Since(paused).Round(100*time.Millisecond), r.err))
		case <-deadline:
			break wait
		}
	}
	if len(failed) > 0 {
		t.Errorf("member %d (a follower) hung; %d of %d waiters (TTL %v) lost their place within %v:\n%s",
			hung, len(failed), waiters, ttl, window, strings.Join(failed, "\n"))
	} else {
		t.Logf("member %d hung for %v; every waiter (TTL %v) kept its place", hung, window, ttl)
	}
	if err := held.Release(ctx); err != nil {
		t.Logf("release: %v", err)
	}
}

// openLocker makes a Locker on the client Open makes for endpoints.
func openLocker(ctx context.Context, t *testing.T, endpoints []string) distlock.Locker {
	t.Helper()
	u, err := url.Parse("etcd://" + strings.Join(endpoints, ",") + "/")
	if err != nil {
		t.Fatal(err)
	}
	be, err := open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := distlock.New(be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// Close of a Locker with a held lease and a waiting Acquire while its only
// member hangs returns within its bounds.

// A waiter that becomes the owner with less than half its TTL left renews
// its lease before the grant; a renewal sent to a member that hangs must not
// hold the Acquire up while the lock sits free (a renewal without a bound
// made the Acquire return only when the member came back, its lease gone
// by then).
func ownedRenewalSurvivesHungMember(t *testing.T, c *testserver.Cluster) {
	endpoints := c.Endpoints()
	ctx := ctxT(t, 4*time.Minute)
	leader, hung, admin, holder := besideFollower(t, c)
	const ttl = 10 * time.Second
	for round := range 2 {
		key := fmt.Sprintf("owned-hang-%d", round)
		held := tryAcquireUntil(ctx, t, holder, key)
		// The waiter's client: the leader and the member about to hang.
		wl, err := New(newClient(t, []string{endpoints[leader], endpoints[hung]}))
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			ls  *distlock.Lease
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		actx, acancel := context.WithTimeout(ctx, 60*time.Second)
		go func() {
			ls, err := wl.Acquire(actx, key, distlock.WithTTL(ttl))
			got <- result{ls, err, time.Now()}
		}()
		var lid clientv3.LeaseID
		for lid == 0 {
			resp, err := admin.Get(ctx, queuePrefix(DefaultPrefix, key), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) == 2 {
				lid = clientv3.LeaseID(resp.Kvs[1].Lease)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // the waiter's watch is up
		if err := c.Members[hung].Pause(); err != nil {
			t.Fatal(err)
		}
		// Wait for a renewal of the wait to have failed: less than TTL/2 left.
		low := false
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); {
			r, err := admin.TimeToLive(ctx, lid)
			if err != nil {
				t.Fatal(err)
			}
			if r.TTL > 0 && r.TTL <= 4 {
				low = true
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !low {
			t.Logf("round %d: every renewal got through", round)
		}
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			t.Logf("round %d: Acquire returned %v after the release (err %v)", round, r.at.Sub(released).Round(10*time.Millisecond), r.err)
			if r.ls != nil {
				_ = r.ls.Release(ctx)
			}
			acancel()
			_ = c.Members[hung].Resume()
			_ = wl.Close()
			continue
		case <-time.After(20 * time.Second):
		}
		// Stuck: is the lock free, our key gone?
		resp, _ := admin.Get(ctx, queuePrefix(DefaultPrefix, key), clientv3.WithPrefix(), clientv3.WithCountOnly())
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		var inOwned []string
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "(*locker).acquire") {
				inOwned = append(inOwned, g)
			}
		}
		_ = c.Members[hung].Resume()
		r := <-got
		acancel()
		t.Fatalf("round %d: the lock was released and this waiter was first, but its Acquire had not returned 20s later "+
			"(%d keys left in the queue; it returned %v after the release once the member resumed: %v)\n%s",
			round, resp.Count, r.at.Sub(released).Round(10*time.Millisecond), r.err, strings.Join(inOwned, "\n\n"))
	}
}

// A client wrapped in a namespace is watched through its wrapper (not a
// watcher of the loss watch's own, which would watch outside the
// namespace) and gets loss notices, also after its watch is made again.
func TestLossWatchNamespacedClient(t *testing.T) {
	s := testserver.Etcd(t)
	ctx := ctxT(t, 60*time.Second)
	admin := newClient(t, []string{s.Addr()})
	cli := newClient(t, []string{s.Addr()})
	const ns = "tenant-a/"
	cli.KV = namespace.NewKV(cli.KV, ns)
	cli.Watcher = namespace.NewWatcher(cli.Watcher, ns)
	cli.Lease = namespace.NewLease(cli.Lease, ns)
	be, err := NewBackend(cli)
	if err != nil {
		t.Fatal(err)
	}
	b := be.(*backend)
	if !b.loss.whole {
		t.Fatal("namespace client watched on a raw stream, outside its namespace")
	}
	l, err := distlock.New(be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	for i := range 3 {
		ls, err := l.TryAcquire(ctx, fmt.Sprintf("ns-%d", i), distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if i > 0 { // break the watch: the successor starts from seen+1
			b.loss.mu.Lock()
			b.loss.cancel()
			b.loss.mu.Unlock()
		}
		if _, err := admin.Delete(ctx, ns+ownerKey(t, ls)); err != nil {
			t.Fatal(err)
		}
		waitLost(t, ls, fmt.Sprintf("namespace, round %d", i))
	}
}

// No goroutine is left after waiting Acquires end by their context, by
// success, and by Close during the wait (the waiter's renewal goroutine
// included).
func TestWaitLeavesNoGoroutines(t *testing.T) {
	s := testserver.Etcd(t)
	ctx := ctxT(t, 60*time.Second)
	cli := newClient(t, []string{s.Addr()})
	if _, err := cli.Get(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	ours := []string{"github.com/distlock/distlock", "go.etcd.io/etcd/client/v3"}
	base, _ := testutil.Goroutines(ours...)
	holder, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	held := tryAcquireUntil(ctx, t, holder, "leak2")
	w, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	// ctx cancel
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := w.Acquire(actx, "leak2", distlock.WithTTL(3*time.Second)); err == nil {
		t.Fatal("acquired a held lock")
	}
	cancel()
	// success
	got := make(chan error, 1)
	go func() {
		ls, err := w.Acquire(ctx, "leak2", distlock.WithTTL(3*time.Second))
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(3 * time.Second)
	_ = held.Release(ctx)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Close during a wait
	held = tryAcquireUntil(ctx, t, holder, "leak2")
	go func() {
		_, err := w.Acquire(ctx, "leak2", distlock.WithTTL(3*time.Second))
		got <- err
	}()
	time.Sleep(2 * time.Second)
	_ = w.Close()
	if err := <-got; err == nil {
		t.Fatal("acquired after Close")
	}
	_ = held.Release(ctx)
	_ = holder.Close()
	time.Sleep(time.Second)
	testutil.CheckNoGoroutines(t, base, ours...)
}

// handOffReadsPastHungMember: a waiter reads its place
// before it takes the lock from an owner that left, and the balancer may
// send that read to a member that hangs. Each such read waited out its
// 2 s bound; a hedged read (sent again after 100 ms, a new pick) does not.
// The waiter's watches and leases go to the live members only, as a watch
// stream made before the hang would; its reads go to any member.
func handOffReadsPastHungMember(t *testing.T, c *testserver.Cluster) {
	endpoints := c.Endpoints()
	ctx := ctxT(t, 3*time.Minute)
	_, hung, admin, holder := besideFollower(t, c, WithLossWatch(false))
	wcli := newClient(t, endpoints)
	live := newClient(t, others(endpoints, hung))
	wcli.Watcher = clientv3.NewWatcher(live)
	wcli.Lease = clientv3.NewLease(live)
	waiter, err := New(wcli, WithLossWatch(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	for range 9 { // every member's connection is up before the hang
		if _, err := wcli.Get(ctx, "warm-up"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Members[hung].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Members[hung].Resume() }()
	var slow, rounds int
	for r := range 6 {
		key := fmt.Sprintf("hand-off-hung-%d", r)
		held := tryAcquireUntil(ctx, t, holder, key)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		type result struct {
			ls  *distlock.Lease
			err error
		}
		got := make(chan result, 1)
		go func() {
			ls, err := waiter.Acquire(rctx, key)
			got <- result{ls, err}
		}()
		queued := false
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !queued; time.Sleep(10 * time.Millisecond) {
			resp, err := admin.Get(ctx, queuePrefix(DefaultPrefix, key), clientv3.WithPrefix(), clientv3.WithCountOnly())
			queued = err == nil && resp.Count == 2
		}
		if !queued { // the join went to the hung member (unbounded; documented)
			cancel()
			<-got
			_ = held.Release(ctx)
			t.Logf("round %d: the waiter's join went to the hung member; skipped", r)
			continue
		}
		time.Sleep(700 * time.Millisecond) // past the waiter's first re-reads
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		res := <-got
		d := time.Since(released)
		cancel()
		if res.err != nil {
			t.Errorf("round %d: waiter: %v", r, res.err)
			continue
		}
		rounds++
		if d > time.Second {
			slow++
		}
		t.Logf("round %d: hand-off took %v", r, d.Round(time.Millisecond))
		// Bounded short: the release too may go to the hung member, and
		// each round has a key of its own.
		rel, rc := context.WithTimeout(ctx, time.Second)
		_ = res.ls.Release(rel)
		rc()
	}
	if slow > 0 {
		t.Errorf("%d of %d hand-offs took over 1 s with one member hung", slow, rounds)
	}
	if rounds == 0 {
		t.Error("no round got the waiter queued")
	}
}

// besideFollower picks a follower to hang (not yet hung) and returns it and
// the leader, with an admin client and a holder Locker that know only the
// other members.
func besideFollower(t *testing.T, c *testserver.Cluster, opts ...distlock.Option) (leader, hung int, admin *clientv3.Client, holder distlock.Locker) {
	t.Helper()
	endpoints := c.Endpoints()
	leader, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	hung = (leader + 1) % len(endpoints)
	admin = newClient(t, others(endpoints, hung))
	holder, err = New(newClient(t, others(endpoints, hung)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	return leader, hung, admin, holder
}
