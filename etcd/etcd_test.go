package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// crash makes b behave like a dead process: its loss watch stops and its
// connection closes, without revoking any lease, so the server keeps its
// locks until their leases expire. (Conformance's Crashable, on top, makes
// the portable layer's calls fail.)
func (b *backend) crash() {
	b.mu.Lock()
	owns := b.owns
	b.owns = false // Close must not close the client a second time
	b.mu.Unlock()
	b.loss.close()
	b.stop()
	b.wg.Wait()
	if owns {
		_ = b.cli.Close()
	}
}

// pollingBackend declares no server queue, so the portable layer waits by
// polling TryLock.
type pollingBackend struct{ *backend }

func (p pollingBackend) Guarantees() driver.Guarantees {
	g := p.backend.Guarantees()
	g.Wait = driver.WaitPoll
	g.FIFO = false // polling waiters race
	return g
}

// Inspect reports no queue, as a backend without one does: with TryLock
// only, nobody waits on the server.
func (p pollingBackend) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	h, err := p.backend.Inspect(ctx, key)
	if err != nil {
		return driver.Holder{}, err
	}
	h.Waiters = -1
	return h, nil
}

// harness runs the suite on endpoints; blocking chooses the native queue
// (Lock) or the portable layer's polling (TryLock only).
func harness(t *testing.T, endpoints []string, blocking bool) conformance.Harness {
	return harnessOn(newClient(t, endpoints), func(context.Context) (*backend, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		b, err := newBackend(cli, true, nil)
		if err != nil {
			_ = cli.Close()
		}
		return b, err
	}, blocking)
}

// harnessOn runs the suite on the backends that open makes (each owning
// its client), with admin to force expiries.
func harnessOn(admin *clientv3.Client, open func(context.Context) (*backend, error), blocking bool) conformance.Harness {
	return conformance.Harness{
		NewBackend: func(ctx context.Context) (driver.Backend, error) {
			b, err := open(ctx)
			switch {
			case err != nil:
				return nil, err
			case blocking:
				return b, nil
			}
			return pollingBackend{b}, nil
		},
		// A crashed process's loss watches stop and its connection closes.
		Crash: func(_ context.Context, b driver.Backend) error {
			if p, ok := b.(pollingBackend); ok {
				b = p.backend
			}
			b.(*backend).crash()
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
	t.Parallel() // with TestSecured's run of the suite
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
	for _, acquire := range []func(context.Context, string, ...distlock.CallOption) (*distlock.Lease, error){l.TryAcquire, l.Acquire} {
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
