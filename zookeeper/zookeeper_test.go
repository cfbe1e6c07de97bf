package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// sessionTimeout is the harness's TTL: short, since crash cases wait it out.
const sessionTimeout = 2 * time.Second

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// adminConn is a plain client for inspecting the server.
func adminConn(t testing.TB, servers ...string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatal("admin connection: no session")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// zkHarness drives the conformance suite against one standalone server.
// Each Locker talks to it through its own relay, so that Crash can sever
// that Locker's TCP connection without a closeSession, and ForceExpire can
// expire the holder's session with its password.
type zkHarness struct {
	t      *testing.T
	srv    *testserver.Server
	admin  *zk.Conn
	book   sessionBook
	mu     sync.Mutex
	relays map[distlock.Locker]*relay // newLocker's
	cuts   map[driver.Backend]*relay  // the conformance harness's
}

func newHarness(t *testing.T, srv *testserver.Server) *zkHarness {
	return &zkHarness{t: t, srv: srv, admin: adminConn(t, srv.Addr()),
		relays: map[distlock.Locker]*relay{}, cuts: map[driver.Backend]*relay{}}
}

func (h *zkHarness) harness() conformance.Harness {
	return conformance.Harness{
		NewBackend: func(ctx context.Context) (driver.Backend, error) {
			b, r, err := h.newBackend(ctx, nil)
			if err != nil {
				return nil, err
			}
			h.mu.Lock()
			h.cuts[b] = r
			h.mu.Unlock()
			return b, nil
		},
		Crash:       func(_ context.Context, b driver.Backend) error { return cutRelay(&h.mu, h.cuts, b) },
		ForceExpire: h.forceExpire,
		TTL:         sessionTimeout,
	}
}

// newBackend dials a backend through a relay of its own, which tests cut
// or sever to fake a crash or a network fault.
func (h *zkHarness) newBackend(ctx context.Context, opts []driver.Option) (driver.Backend, *relay, error) {
	r := newRelay(h.t, h.srv.Addr(), &h.book)
	b, err := dialBackend(ctx, []string{r.addr()}, append([]driver.Option{WithSessionTimeout(sessionTimeout).DriverOption()}, opts...))
	if err != nil {
		return nil, nil, err
	}
	return b, r, nil
}

func (h *zkHarness) newLocker(ctx context.Context, opts ...distlock.Option) (distlock.Locker, error) {
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	b, r, err := h.newBackend(ctx, backendOpts)
	if err != nil {
		return nil, err
	}
	l, err := distlock.New(b, lockerOpts...)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.relays[l] = r
	h.mu.Unlock()
	return l, nil
}

func (h *zkHarness) crash(_ context.Context, l distlock.Locker) error {
	return cutRelay(&h.mu, h.relays, l)
}

// cutRelay cuts k's relay in relays (guarded by mu) as a crash would: the
// connection drops without a closeSession, so k can neither renew nor
// release, and the server ends its session after the timeout.
func cutRelay[K comparable](mu *sync.Mutex, relays map[K]*relay, k K) error {
	mu.Lock()
	r := relays[k]
	mu.Unlock()
	if r == nil {
		return errors.New("not made by this harness")
	}
	r.cut()
	return nil
}

// holderPath returns the path of the lowest lock znode in dir.
func holderPath(c *zk.Conn, dir string) (string, error) {
	children, _, err := c.Children(dir)
	if err != nil {
		return "", fmt.Errorf("list %s: %w", dir, err)
	}
	first, firstSeq := "", int64(math.MaxInt64)
	for _, name := range children {
		if _, seq, ok := parseName(name); ok && seq < firstSeq {
			first, firstSeq = name, seq
		}
	}
	if first == "" {
		return "", fmt.Errorf("%s holds no lock znode", dir)
	}
	return dir + "/" + first, nil
}

// holderSession returns the session that owns key's lock znode.
func holderSession(admin *zk.Conn, base, key string) (int64, error) {
	p, err := holderPath(admin, base+"/"+escapeKey(key))
	if err != nil {
		return 0, err
	}
	ok, st, err := admin.Exists(p)
	if err != nil || !ok {
		return 0, fmt.Errorf("stat %s: %v", p, err)
	}
	return st.EphemeralOwner, nil
}

func (h *zkHarness) forceExpire(ctx context.Context, key string) error {
	sid, err := holderSession(h.admin, DefaultBasePath, key)
	if err != nil {
		return err
	}
	info, ok := h.book.get(sid)
	if !ok {
		return fmt.Errorf("no password recorded for session %#x", sid)
	}
	// Hold the owner's reconnection back, or it could take the session
	// back before the closeSession.
	release := info.relay.holdNew()
	err = expireSession(ctx, h.srv.Addr(), sid, info.passwd, sessionTimeout)
	release()
	if err != nil {
		return err
	}
	// Return once the owner has reconnected and learnt of the expiry, as
	// it would at once in a real expiry (a session expires only while its
	// client is away, and the client learns on its return).
	var owner *backend
	h.mu.Lock()
	for l, r := range h.relays {
		if r == info.relay {
			distlock.As(l, &owner)
		}
	}
	for b, r := range h.cuts {
		if r == info.relay {
			owner, _ = b.(*backend)
		}
	}
	h.mu.Unlock()
	if owner == nil {
		return nil
	}
	for {
		if id := owner.sessionID(); id != 0 && id != sid {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the owner of session %#x did not learn of its expiry: %w", sid, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestStandalone(t *testing.T) {
	// Reap empty containers every 200ms rather than every minute, so that
	// the container test sees it and the suite runs while directories come
	// and go.
	srv := testserver.ZooKeeper(t, testserver.WithZKContainerReaper(200*time.Millisecond, 0))
	h := newHarness(t, srv)

	t.Run("Conformance", func(t *testing.T) { conformance.Run(t, h.harness()) })
	t.Run("FiftyWaitersWakeOneEach", func(t *testing.T) { testFiftyWaiters(t, h) })
	t.Run("TryLockLeavesNothing", func(t *testing.T) { testTryLockLeavesNothing(t, h) })
	t.Run("KeysEscaped", func(t *testing.T) { testKeysEscaped(t, h) })
	t.Run("ContainerKeyDirectory", func(t *testing.T) { testContainer(t, h) })
	t.Run("LostCreateReply", func(t *testing.T) { testLostCreateReply(t, h) })
	t.Run("ReconnectWithinGrace", func(t *testing.T) { testReconnectWithinGrace(t, h) })
	t.Run("DownPastGrace", func(t *testing.T) { testDownPastGrace(t, h) })
	t.Run("CrashLossBeforeTakeover", func(t *testing.T) { testCrashLossBeforeTakeover(t, h) })
	t.Run("ManyLeasesRenewed", func(t *testing.T) { testManyLeasesRenewed(t, h) })
	t.Run("DeletedZnodeReported", func(t *testing.T) { testDeletedZnodeReported(t, h) })
	t.Run("DataSetThenDeleted", func(t *testing.T) { testDataSetThenDeleted(t, h) })
	t.Run("DeletedWhileDisconnected", func(t *testing.T) { testDeletedWhileDisconnected(t, h) })
	t.Run("ValueStored", func(t *testing.T) { testValueStored(t, h) })
	t.Run("InspectHolderGone", func(t *testing.T) { testInspectHolderGone(t, h) })
	t.Run("WatchIgnoresWaiters", func(t *testing.T) { testWatchIgnoresWaiters(t, h) })
	t.Run("WatchDirectoryComesAndGoes", func(t *testing.T) { testWatchDirectoryComesAndGoes(t, h) })
	t.Run("WatchSessionEvents", func(t *testing.T) { testWatchSessionEvents(t, h) })
	t.Run("WatchRearmWhileDown", func(t *testing.T) { testWatchRearmWhileDown(t, h) })
	t.Run("WatchCloseLeavesLittle", func(t *testing.T) { testWatchCloseLeavesLittle(t, h) })
	t.Run("NewRefreshBatch", func(t *testing.T) { testNewRefreshBatch(t, srv) })
	t.Run("NewWithEvents", func(t *testing.T) { testNewWithEvents(t, srv) })
	t.Run("Open", func(t *testing.T) { testOpen(t, srv) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t) })
}

func locker(t *testing.T, h *zkHarness, opts ...distlock.Option) distlock.Locker {
	t.Helper()
	l, err := h.newLocker(ctxFor(t, 20*time.Second), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func backendOf(t *testing.T, l distlock.Locker) *backend {
	t.Helper()
	var b *backend
	if !distlock.As(l, &b) {
		t.Fatal("no *backend under the Locker")
	}
	return b
}

func children(t *testing.T, admin *zk.Conn, key string) []string {
	t.Helper()
	c, _, err := admin.Children(DefaultBasePath + "/" + escapeKey(key))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond until it holds or a generous bound passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testFiftyWaiters queues 50 waiters one after another behind a holder and
// checks that they acquire in queue order and that every release wakes
// exactly one waiter: when the k-th waiter holds the lock, exactly k+1
// predecessor watches have fired, in all the Lockers together.
func testFiftyWaiters(t *testing.T, h *zkHarness) {
	const waiters, lockersN = 50, 5
	key := "fifty-" + t.Name()
	ls := make([]distlock.Locker, lockersN)
	bs := make([]*backend, lockersN)
	for i := range ls {
		ls[i] = locker(t, h)
		bs[i] = backendOf(t, ls[i])
	}
	fires := func() (n int64) {
		for _, b := range bs {
			n += b.watchFires.Load()
		}
		return n
	}
	holder, err := ls[0].TryAcquire(ctxFor(t, 10*time.Second), key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	base := fires()
	var (
		mu    sync.Mutex
		order []int
		bad   []string
		wg    sync.WaitGroup
	)
	ctx := ctxFor(t, 2*time.Minute)
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := ls[i%lockersN].Acquire(ctx, key, distlock.WithTTL(time.Minute))
			if err != nil {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("waiter %d: %v", i, err))
				mu.Unlock()
				return
			}
			mu.Lock()
			k := len(order)
			order = append(order, i)
			if got := fires() - base; got != int64(k+1) {
				bad = append(bad, fmt.Sprintf("waiter %d acquired %d-th with %d watch events fired, want %d", i, k, got, k+1))
			}
			mu.Unlock()
			if err := lease.Release(ctx); err != nil {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("waiter %d release: %v", i, err))
				mu.Unlock()
			}
		}()
		// Join one at a time, so that queue order is known.
		waitFor(t, "waiter to join the queue", func() bool { return len(children(t, h.admin, key)) == i+2 })
	}
	if got := fires() - base; got != 0 {
		t.Fatalf("%d watches fired before any release", got)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, s := range bad {
		t.Error(s)
	}
	if !sort.IntsAreSorted(order) || len(order) != waiters {
		t.Errorf("acquisition order %v is not the queue order", order)
	}
	if got := fires() - base; got != waiters {
		t.Errorf("%d watch events for %d hand-offs", got, waiters)
	}
}

func testTryLockLeavesNothing(t *testing.T, h *zkHarness) {
	a, b := locker(t, h), locker(t, h)
	key := "try/" + t.Name()
	ctx := ctxFor(t, 20*time.Second)
	lease, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var held *distlock.HeldError
	if _, err := b.TryAcquire(ctx, key); !errors.As(err, &held) || held.Key != key {
		t.Fatalf("TryAcquire on a held key: want *HeldError for %q, got %v", key, err)
	}
	if c := children(t, h.admin, key); len(c) != 1 {
		t.Fatalf("after a failed TryAcquire the key directory holds %v", c)
	}
	var n Node
	if !lease.As(&n) || n.Czxid != int64(lease.Token()) || !strings.HasPrefix(n.Path, DefaultBasePath+"/") {
		t.Fatalf("Lease.As(*Node) = %+v for token %d", n, lease.Token())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func testKeysEscaped(t *testing.T, h *zkHarness) {
	l := locker(t, h)
	ctx := ctxFor(t, 30*time.Second)
	keys := []string{"a/b", "a%2Fb", ".", "..", "/", "with space", "ключ", "zookeeper", "x/../y", strings.Repeat("é", 256)}
	var leases []*distlock.Lease
	dirs := map[string]string{}
	for _, k := range keys {
		lease, err := l.TryAcquire(ctx, k) // all held at once: no two keys share a directory
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", k, err)
		}
		leases = append(leases, lease)
		var n Node
		lease.As(&n)
		rest := strings.TrimPrefix(n.Path, DefaultBasePath+"/")
		dir, name, ok := strings.Cut(rest, "/")
		if !ok || strings.Contains(name, "/") || dir == "." || dir == ".." {
			t.Errorf("key %q: znode %q is not base/<one segment>/<name>", k, n.Path)
		}
		if other, dup := dirs[dir]; dup {
			t.Errorf("keys %q and %q share directory %q", k, other, dir)
		}
		dirs[dir] = k
	}
	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// testContainer checks that a key's directory is a container znode, which
// the server reaps once it is empty.
func testContainer(t *testing.T, h *zkHarness) {
	l := locker(t, h)
	ctx := ctxFor(t, 20*time.Second)
	key := "container-" + t.Name()
	dir := DefaultBasePath + "/" + escapeKey(key)
	lease, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a reaping pass or two: a held key's directory stays
	if ok, _, err := h.admin.Exists(dir); err != nil || !ok {
		t.Fatalf("key directory of a held key: exists=%v, %v", ok, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the empty key directory to be reaped", func() bool {
		ok, _, err := h.admin.Exists(dir)
		return err == nil && !ok
	})
	// And the key works again after its directory was reaped, with a larger token.
	again, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() <= lease.Token() {
		t.Fatalf("token %d after the directory was recreated, previous %d", again.Token(), lease.Token())
	}
	again.Release(ctx)
}

// testLostCreateReply loses the reply to a create (the server applies it,
// the client never hears) and checks that the znode, found by its owner id,
// is deleted once the client reconnects: the queue is not blocked until
// the session ends.
func testLostCreateReply(t *testing.T, h *zkHarness) {
	holderL, victimL, thirdL := locker(t, h), locker(t, h), locker(t, h)
	key := "lost-reply-" + t.Name()
	ctx := ctxFor(t, 30*time.Second)
	holder, err := holderL.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	r := h.relays[victimL]
	h.mu.Unlock()
	vb := backendOf(t, victimL)
	r.setSwallow(true)
	errc := make(chan error, 1)
	go func() {
		_, err := vb.Lock(ctx, driver.Request{Key: key, TTL: time.Minute, Owner: "0123456789abcdef0123456789abcdef"})
		errc <- err
	}()
	waitFor(t, "the victim's znode to be created", func() bool { return len(children(t, h.admin, key)) == 2 })
	r.sever() // the reply is lost with the connection
	r.setSwallow(false)
	if err := <-errc; err == nil {
		t.Fatal("Lock succeeded without its create's reply")
	} else {
		t.Logf("Lock without the create's reply: %v", err)
	}
	waitFor(t, "the orphaned znode to be deleted", func() bool { return len(children(t, h.admin, key)) == 1 })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := thirdL.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("key still blocked after the holder's release: %v", err)
	}
	lease.Release(ctx)
}
