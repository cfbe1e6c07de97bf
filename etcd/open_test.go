package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Open by URL, and what a down server does to it and to a Locker.

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

	// TLS to a plain port: Unavailable at once, saying why.
	start := time.Now()
	l4, err := distlock.Open(ctx, "etcds://"+e.addr+"/?skip_verify=true&dial_timeout=3s")
	if err == nil {
		l4.Close()
		t.Fatal("etcds:// to a plain port: Open succeeded")
	}
	if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), "does not speak TLS") {
		t.Fatalf("etcds:// to a plain port: want ErrUnavailable saying it does not speak TLS, got %v", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("etcds:// to a plain port: Open took %v", d)
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
		{"etcds://127.0.0.1:2379/?cert_file=/c.pem", "cert_file and key_file"},
		{"etcds://127.0.0.1:2379/?ca_file=/nonexistent/ca.pem", "ca_file"},
		{"etcds://127.0.0.1:2379/?tls=maybe", "tls"},
		{"etcd://app@127.0.0.1:2379/", "needs a password"},
		{"etcd://:s3cret@127.0.0.1:2379/", "needs a password"},
		{"etcd://app:s3cret@127.0.0.1:2379/?password_file=/p", "password_file"},
		{"etcd://app@127.0.0.1:2379/?password_file=/nonexistent/p", "password_file"},
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
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) = %v: shows the password", tc.url, err)
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
	// The library's goroutines, and the etcd client's that the backend
	// starts (watches, keep-alives); not gRPC's own connection goroutines.
	ours := []string{"github.com/distlock/distlock", "go.etcd.io/etcd/client/v3"}
	base, _ := testutil.Goroutines(ours...)
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
	testutil.CheckNoGoroutines(t, base, ours...)
}
