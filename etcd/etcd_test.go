package etcd

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// harnessTTL is the short TTL of the conformance expiry cases. The test
// servers' minimum lease TTL is 1 s (50 ms heartbeats, 500 ms elections), and
// the backend asks for ceil(TTL)+1 s, so a crashed holder frees within 2 s.
const harnessTTL = time.Second

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// crash makes b behave like a dead process: its loss watches stop and its
// connection closes, without revoking any lease, so the server keeps its
// locks until their leases expire. (Conformance's Crashable, on top, makes
// the portable layer's calls fail.)
func (b *backend) crash() {
	b.mu.Lock()
	owns := b.owns
	b.owns = false // Close must not close the client a second time
	b.mu.Unlock()
	b.stop()
	b.wg.Wait()
	if owns {
		_ = b.cli.Close()
	}
}

// crashBackend is conformance.Crashable plus the backend's own crash (its
// loss watches stop, its connection closes).
type crashBackend struct {
	*conformance.Crashable
	b    *backend
	dead atomic.Bool
}

func (c *crashBackend) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if c.dead.Load() {
		return driver.Grant{}, conformance.ErrCrashed
	}
	return c.b.Lock(ctx, req)
}

func (c *crashBackend) crash() {
	c.dead.Store(true)
	c.Crashable.Crash()
	c.b.crash()
}

// pollingBackend declares no server queue, so the portable layer waits by
// polling TryLock.
type pollingBackend struct{ *conformance.Crashable }

func (p pollingBackend) Guarantees() distlock.Guarantees {
	g := p.Crashable.Guarantees()
	g.Wait = distlock.WaitPoll
	return g
}

// harness runs the suite on endpoints; blocking chooses the native queue
// (Lock) or the portable layer's polling (TryLock only).
func harness(t *testing.T, endpoints []string, blocking bool) conformance.Harness {
	admin := newClient(t, endpoints)
	var (
		mu      sync.Mutex
		crashes = map[distlock.Locker]func(){}
	)
	return conformance.Harness{
		NewLocker: func(ctx context.Context) (distlock.Locker, error) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
			if err != nil {
				return nil, err
			}
			b, err := newBackend(cli, true, nil)
			if err != nil {
				_ = cli.Close()
				return nil, err
			}
			c := &crashBackend{Crashable: conformance.NewCrashable(b), b: b}
			var wrapped driver.Backend = c
			if !blocking {
				wrapped = pollingBackend{c.Crashable}
			}
			l, err := distlock.New(wrapped)
			if err != nil {
				_ = b.Close()
				return nil, err
			}
			mu.Lock()
			crashes[l] = c.crash
			mu.Unlock()
			return l, nil
		},
		Crash: func(_ context.Context, l distlock.Locker) error {
			mu.Lock()
			crash := crashes[l]
			mu.Unlock()
			if crash == nil {
				return errors.New("unknown Locker")
			}
			crash()
			return nil
		},
		ForceExpire: func(ctx context.Context, key string) error {
			return revokeOwner(ctx, admin, DefaultPrefix, key)
		},
		TTL: harnessTTL,
	}
}

// revokeOwner revokes the lease of key's current holder from an admin client,
// as a lease expiry on the server would end it.
func revokeOwner(ctx context.Context, admin *clientv3.Client, prefix, key string) error {
	resp, err := admin.Get(ctx, queuePrefix(prefix, key), clientv3.WithFirstCreate()...)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("key %q is not held", key)
	}
	_, err = admin.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}

func TestConformance(t *testing.T) {
	s := testserver.Etcd(t)
	conformance.Run(t, harness(t, []string{s.Addr()}, true))
}

// TestConformancePolling runs the suite with the native queue hidden, so
// TryLock carries every wait; it checks TryLock leaves nothing behind.
func TestConformancePolling(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the blocking run covers the backend")
	}
	s := testserver.Etcd(t)
	conformance.Run(t, harness(t, []string{s.Addr()}, false))
}

// env is one etcd server with an admin client and a Locker factory.
type env struct {
	t     *testing.T
	addr  string
	admin *clientv3.Client
}

func newEnv(t *testing.T) *env {
	s := testserver.Etcd(t)
	return &env{t: t, addr: s.Addr(), admin: newClient(t, []string{s.Addr()})}
}

func (e *env) locker(opts ...distlock.Option) distlock.Locker {
	e.t.Helper()
	l, err := New(newClient(e.t, []string{e.addr}), opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = l.Close() })
	return l
}

func (e *env) queueLen(prefix, key string) int64 {
	e.t.Helper()
	resp, err := e.admin.Get(context.Background(), queuePrefix(prefix, key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Count
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestTokenIsOwnerCreateRevision(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	for _, acquire := range []func(context.Context, string, ...distlock.Option) (*distlock.Lease, error){l.TryAcquire, l.Acquire} {
		ls, err := acquire(ctx, "tok")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.admin.Get(ctx, queuePrefix(DefaultPrefix, "tok"), clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("owner key: %v %v", resp, err)
		}
		if got := resp.Kvs[0].CreateRevision; int64(ls.Token()) != got {
			t.Fatalf("token %d, owner key CreateRevision %d", ls.Token(), got)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.queueLen(DefaultPrefix, "tok"); n != 0 {
			t.Fatalf("%d keys left after release", n)
		}
	}
}

// Keys that contain "/" or "%" must not share or nest queues.
func TestKeyEscaping(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	var leases []*distlock.Lease
	for _, k := range []string{"a", "a/b", "a%2Fb", "a/", "/a"} {
		ls, err := l.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire(%q) while only other keys are held: %v", k, err)
		}
		leases = append(leases, ls)
	}
	for _, ls := range leases {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPrefixesAreSeparate(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	a, b := e.locker(WithPrefix("app1")), e.locker(WithPrefix("app2/"))
	la, err := a.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("another prefix should not see the lock: %v", err)
	}
	if n := e.queueLen("app2", "k"); n != 1 {
		t.Fatalf("prefix app2 holds %d keys, want 1", n)
	}
	_ = la.Release(ctx)
	_ = lb.Release(ctx)
	if _, err := New(e.admin, WithPrefix("/")); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("empty prefix: want ErrInvalidOption, got %v", err)
	}
	if _, err := New(nil); !errors.Is(err, distlock.ErrInvalid) {
		t.Fatalf("nil client: want ErrInvalid, got %v", err)
	}
}

// Waiters acquire in the order they joined the queue, and TryAcquire does
// not jump it.
func TestFIFO(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	const key, waiters = "fifo", 5
	holder, err := e.locker().TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		l := e.locker()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := l.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			time.Sleep(10 * time.Millisecond)
			_ = ls.Release(ctx)
		}()
		// Let waiter i join the queue before waiter i+1 starts.
		for e.queueLen(DefaultPrefix, key) != int64(i+2) {
			if ctx.Err() != nil {
				t.Fatal("waiter did not join the queue")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if _, err := e.locker().TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with waiters queued: want ErrNotAcquired, got %v", err)
	}
	if n := e.queueLen(DefaultPrefix, key); n != waiters+1 {
		t.Fatalf("a failed TryAcquire left a key behind: %d keys, want %d", n, waiters+1)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d acquired in position %d", got, want)
		}
		want++
	}
	if want != waiters {
		t.Fatalf("%d of %d waiters acquired", want, waiters)
	}
}

// A waiter that gives up in the middle of the queue leaves it, and the
// waiter behind it moves up to its predecessor.
func TestCancelledMiddleWaiter(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	const key = "middle"
	holder, err := e.locker().TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancelMiddle := context.WithCancel(ctx)
	middleDone := make(chan error, 1)
	go func() {
		_, err := e.locker().Acquire(mctx, key)
		middleDone <- err
	}()
	for e.queueLen(DefaultPrefix, key) != 2 {
		time.Sleep(5 * time.Millisecond)
	}
	last := make(chan *distlock.Lease, 1)
	go func() {
		ls, err := e.locker().Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		last <- ls
	}()
	for e.queueLen(DefaultPrefix, key) != 3 {
		time.Sleep(5 * time.Millisecond)
	}
	cancelMiddle()
	if err := <-middleDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if n := e.queueLen(DefaultPrefix, key); n != 2 {
		t.Fatalf("queue holds %d keys after the middle waiter left, want 2", n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ls := <-last; ls != nil {
		if ls.Token() <= holder.Token() {
			t.Fatalf("token %d after %d", ls.Token(), holder.Token())
		}
		_ = ls.Release(ctx)
	}
}

// A waiter keeps its queue key alive past its own TTL (its lease is renewed
// while it waits), and gets a usable lease once the holder leaves.
func TestWaitLongerThanTTL(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	holder, err := e.locker().TryAcquire(ctx, "long-wait", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lease, 1)
	go func() {
		ls, err := e.locker().Acquire(ctx, "long-wait", distlock.WithTTL(time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	time.Sleep(4 * time.Second) // two lease lifetimes (ceil(1s)+1s)
	if n := e.queueLen(DefaultPrefix, "long-wait"); n != 2 {
		t.Fatalf("queue holds %d keys while a waiter waits, want 2", n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ls := <-got
	if ls == nil {
		return
	}
	if !ls.Expires().After(time.Now()) {
		t.Fatalf("lease acquired after a long wait is already expired: %v", ls.Expires())
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Sub-second and fractional TTLs: the etcd lease is whole seconds (at least
// the server minimum), the lease's Expires never goes past the TTL asked.
func TestTTLRounding(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	for _, ttl := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second} {
		before := time.Now()
		ls, err := l.TryAcquire(ctx, "ttl", distlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		if exp := ls.Expires(); exp.After(after.Add(ttl)) {
			t.Errorf("TTL %v: Expires %v after the acquire's end + TTL", ttl, exp.Sub(after))
		}
		var id clientv3.LeaseID
		if !ls.As(&id) {
			t.Fatal("Lease.As(*clientv3.LeaseID) = false")
		}
		resp, err := e.admin.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := leaseSeconds(ttl); resp.GrantedTTL != want {
			t.Errorf("TTL %v: etcd lease granted %ds, want %ds", ttl, resp.GrantedTTL, want)
		}
		// Honest: the server keeps the key at least until Expires.
		if exp := ls.Expires(); exp.After(before.Add(time.Duration(resp.GrantedTTL) * time.Second)) {
			t.Errorf("TTL %v: Expires %v after the lease could end", ttl, exp.Sub(before))
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A Refresh with another TTL moves the key to another lease; the token stays.
func TestRefreshNewTTLKeepsToken(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	ls, err := e.locker().TryAcquire(ctx, "move", distlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var before, after clientv3.LeaseID
	ls.As(&before)
	if err := ls.Refresh(ctx, distlock.WithTTL(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	ls.As(&after)
	if before == after {
		t.Fatal("a refresh with a new TTL kept the old lease")
	}
	resp, err := e.admin.Get(ctx, queuePrefix(DefaultPrefix, "move"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("%v %v", resp, err)
	}
	if kv := resp.Kvs[0]; kv.CreateRevision != int64(ls.Token()) || clientv3.LeaseID(kv.Lease) != after {
		t.Fatalf("key rev %d lease %x; want token %d lease %x", kv.CreateRevision, kv.Lease, ls.Token(), after)
	}
	// The old lease can be revoked without touching the lock.
	if _, err := e.admin.Revoke(ctx, before); err != nil {
		t.Fatal(err)
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Fatalf("refresh after the old lease was revoked: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The Cmp escape hatch holds exactly while the lease owns the lock.
func TestCmpEscapeHatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	guarded := func(ls *distlock.Lease) bool {
		var cmp clientv3.Cmp
		if !ls.As(&cmp) {
			t.Fatal("Lease.As(*clientv3.Cmp) = false")
		}
		resp, err := e.admin.Txn(ctx).If(cmp).Then(clientv3.OpPut("guarded", ls.Token().String())).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	ls, err := l.TryAcquire(ctx, "cmp")
	if err != nil {
		t.Fatal(err)
	}
	if !guarded(ls) {
		t.Fatal("guarded write failed while holding the lock")
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if guarded(ls) {
		t.Fatal("guarded write succeeded after release")
	}
	ls2, err := l.TryAcquire(ctx, "cmp")
	if err != nil {
		t.Fatal(err)
	}
	if guarded(ls) || !guarded(ls2) {
		t.Fatal("the old lease's Cmp must fail and the new one's hold")
	}
	if err := revokeOwner(ctx, e.admin, DefaultPrefix, "cmp"); err != nil {
		t.Fatal(err)
	}
	if guarded(ls2) {
		t.Fatal("guarded write succeeded after the lease was revoked")
	}
	var cli *clientv3.Client
	if !distlock.As(l, &cli) || cli == nil {
		t.Fatal("Locker As(**clientv3.Client) = false")
	}
}

// With the loss watch, a revoked lease closes Done at once, without a
// refresh; without it, only the local deadline ends it.
func TestLossWatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	ls, err := e.locker().TryAcquire(ctx, "loss", distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := revokeOwner(ctx, e.admin, DefaultPrefix, "loss"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close after the lease was revoked (no refresh, TTL 20s)")
	}
	if !errors.Is(ls.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", ls.Err())
	}

	quiet, err := e.locker(WithLossWatch(false)).TryAcquire(ctx, "quiet", distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := revokeOwner(ctx, e.admin, DefaultPrefix, "quiet"); err != nil {
		t.Fatal(err)
	}
	if err := quiet.Refresh(ctx); !errors.Is(err, distlock.ErrNotHeld) || !errors.Is(err, distlock.ErrLeaseLost) {
		t.Fatalf("Refresh of a revoked lease: want ErrNotHeld and ErrLeaseLost, got %v", err)
	}
}

// Recycled leases: an uncontended acquire on a warm Locker reuses the lease
// of the previous release (no grant).
func TestLeaseRecycled(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	var ids []clientv3.LeaseID
	for i := 0; i < 3; i++ {
		ls, err := l.Acquire(ctx, "recycle")
		if err != nil {
			t.Fatal(err)
		}
		var id clientv3.LeaseID
		ls.As(&id)
		ids = append(ids, id)
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("leases %x: want one recycled lease", ids)
	}
	leases, err := e.admin.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(leases.Leases); n != 1 {
		t.Fatalf("%d leases on the server, want 1", n)
	}
	// A recycled lease revoked behind our back costs one failed attempt,
	// for Acquire and TryAcquire alike, and is not reused.
	for _, acquire := range []func(context.Context, string, ...distlock.Option) (*distlock.Lease, error){l.Acquire, l.TryAcquire} {
		if _, err := e.admin.Revoke(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := acquire(ctx, "recycle"); err == nil {
			t.Fatal("acquire on a revoked recycled lease succeeded")
		}
		ls, err := acquire(ctx, "recycle")
		if err != nil {
			t.Fatalf("second attempt after the recycled lease was revoked: %v", err)
		}
		ls.As(&ids[0])
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.queueLen(DefaultPrefix, "recycle"); n != 0 {
			t.Fatalf("%d keys left", n)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leases, err = e.admin.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(leases.Leases); n != 0 {
		t.Fatalf("%d leases left after Close, want 0", n)
	}
}

func TestOpen(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l, err := distlock.Open(ctx, "etcd://"+e.addr+",127.0.0.1:1/?prefix=opened&ttl=7s&loss_watch=false&dial_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	if g := l.Guarantees(); g.Backend != "etcd" || g.FailuresTolerated != 0 || !g.FIFO || g.Wait != distlock.WaitQueue {
		t.Fatalf("Guarantees = %+v", g)
	}
	ls, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if ls.TTL() != 7*time.Second {
		t.Fatalf("ttl=7s gave %v", ls.TTL())
	}
	if n := e.queueLen("opened", "k"); n != 1 {
		t.Fatalf("prefix=opened: %d keys under it", n)
	}
	var cli *clientv3.Client
	if !distlock.As(l, &cli) {
		t.Fatal("As(**clientv3.Client) = false")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if cli.Ctx().Err() == nil {
		t.Fatal("Close did not close the client Open made")
	}
	if n := e.queueLen("opened", "k"); n != 0 {
		t.Fatalf("Close left %d keys", n)
	}

	// A caller's client stays open.
	own := newClient(t, []string{e.addr})
	l2, err := New(own)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if own.Ctx().Err() != nil {
		t.Fatal("Close closed the caller's client")
	}
	three := newClient(t, []string{e.addr, e.addr, e.addr})
	l3, err := New(three)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Close()
	if n := l3.Guarantees().FailuresTolerated; n != 1 {
		t.Fatalf("three endpoints: FailuresTolerated = %d, want 1", n)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"etcd://", "names no server"},
		{"etcd://127.0.0.1:2379/locks", "prefix"},
		{"etcd://127.0.0.1:2379/?bogus=1", "bogus"},
		{"etcd://127.0.0.1:2379/?prefix=", "prefix"},
		{"etcd://127.0.0.1:2379/?dial_timeout=-1s", "dial_timeout"},
		{"etcd://127.0.0.1:2379/?loss_watch=maybe", "loss_watch"},
		{"etcd://127.0.0.1:2379/?ttl=0s", "TTL"},
	} {
		l, err := distlock.Open(ctx, tc.url)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v; want ErrInvalid mentioning %q", tc.url, err, tc.want)
		}
	}
}

// A cluster nobody answers for fails Open within its deadline.
func TestOpenDownServer(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	l, err := distlock.Open(ctx, "etcd://127.0.0.1:1/")
	if err == nil {
		l.Close()
		t.Fatal("Open of a closed port succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v with a 500ms deadline", d)
	}
	if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("want ErrUnavailable naming the address, got %v", err)
	}
}

// A server that goes away makes calls fail within their deadline, with the
// server's error, not a hang.
func TestServerDown(t *testing.T) {
	s := testserver.Etcd(t)
	l, err := New(newClient(t, []string{s.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ctxT(t, 10*time.Second)
	ls, err := l.TryAcquire(ctx, "down")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	for name, call := range map[string]func(context.Context) error{
		"TryAcquire": func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "other"); return err },
		"Acquire":    func(ctx context.Context) error { _, err := l.Acquire(ctx, "other"); return err },
		"Refresh":    func(ctx context.Context) error { return ls.Refresh(ctx) },
		"Release":    func(ctx context.Context) error { return ls.Release(ctx) },
	} {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := call(cctx)
		cancel()
		if err == nil {
			t.Errorf("%s succeeded against a paused server", name)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s returned after %v with a 300ms deadline", name, d)
		}
	}
}

// Close stops every goroutine the backend started (loss watches); a caller's
// client is left as it was found.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	cli := newClient(t, []string{e.addr})
	if _, err := cli.Get(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	l, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	var held []*distlock.Lease
	for i := 0; i < 5; i++ {
		ls, err := l.Acquire(ctx, fmt.Sprint("g", i), distlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _ = l.Acquire(wctx, "g0") // a waiter that gives up
	cancel()
	_ = held[1].Release(ctx)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before New:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
