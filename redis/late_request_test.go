package redis_test

// Requests that land late, or twice: go-redis resends a command after its
// read timeout on a new connection while the first copy may still be on its
// way, and a reply can be lost after the script ran. No request of a lease
// may then shorten, extend, re-take or release what a later request of the
// same lease decided.

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// lateDelay is how long a held request copy stays on its way: far past the
// resending client's read timeout.
const lateDelay = 1500 * time.Millisecond

// resendingLocker is a Locker whose client reaches addr with a short read
// timeout, so that go-redis itself resends a command whose reply is late
// (MaxRetries: the default three), on a new connection.
func resendingLocker(t *testing.T, addr string) distlock.Locker {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: 200 * time.Millisecond})
	l, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		_ = c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// A short refresh held up in the network, resent and answered, then a longer
// refresh: the late first copy of the short one must not cut the lock back
// to the short TTL under a lease that counts on the long one.
func TestLateShortRefreshDoesNotShortenLaterRefresh(t *testing.T) {
	srv := testserver.Redis(t)
	px := testutil.NewDelayProxy(t, srv.Addr(), lateDelay)
	a := resendingLocker(t, px.Addr())
	b := newLocker(t, srv.Addr())
	const key = "late-refresh"
	ctx := t.Context()
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Refresh(ctx); err != nil { // the refresh script is loaded
		t.Fatal(err)
	}
	px.HoldNext(1, []byte("\r\n1000\r\n")) // the 1 s refresh's first copy
	if err := la.Refresh(ctx, distlock.WithTTL(time.Second)); err != nil {
		t.Fatalf("short refresh (answered by the resent copy): %v", err)
	}
	if err := la.Refresh(ctx, distlock.WithTTL(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lateDelay + 1200*time.Millisecond) // the late copy landed, and its 1 s passed
	lb, err := b.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err == nil {
		defer lb.Release(context.WithoutCancel(ctx))
		t.Fatalf("two holders: A (token %d, Err %v, %v left) and B (token %d)",
			la.Token(), la.Err(), time.Until(la.Expires()).Round(time.Millisecond), lb.Token())
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A late copy of a lease's own acquire (its resend answered first) that
// lands after the lease's plain Release must take nothing: no phantom
// holder, no key blocked for a TTL.
func TestLateAcquireCopyAfterReleaseTakesNothing(t *testing.T) {
	srv := testserver.Redis(t)
	px := testutil.NewDelayProxy(t, srv.Addr(), lateDelay)
	a := resendingLocker(t, px.Addr())
	b := newLocker(t, srv.Addr())
	const key = "late-acquire"
	ctx := t.Context()
	loadScripts(t, a, "late-acquire-warm")
	px.HoldNext(1, []byte(key+"}"))
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("acquire (answered by the resent copy): %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lateDelay + 300*time.Millisecond) // the late copy landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h.Held {
		t.Fatalf("a released lease's late acquire copy took %q again: %+v", key, h)
	}
	lb, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("key stranded by a released lease's late acquire copy: %v", err)
	}
	_ = lb.Release(ctx)
}

// A release whose reply is lost after the script ran is resent by go-redis
// (below any hook); the resend finds the key gone. The release freed the
// key, so it reports success and the lease ends released, not lost.
func TestResentReleaseReportsSuccess(t *testing.T) {
	srv := testserver.Redis(t)
	const key = "resent-release"
	var armed atomic.Bool
	var d net.Dialer
	c := goredis.NewClient(&goredis.Options{
		Addr: srv.Addr(), ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &dropConn{Conn: conn, armed: &armed}, nil
		},
	})
	a, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		_ = c.Close()
		t.Fatal(err)
	}
	defer a.Close()
	ctx := t.Context()
	loadScripts(t, a, "resent-release-warm")
	la, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true) // the release's reply is lost; go-redis resends it
	if err := la.Release(ctx); err != nil {
		t.Fatalf("a release that freed the key reported: %v", err)
	}
	if err := la.Err(); !errors.Is(err, distlock.ErrReleased) {
		t.Fatalf("lease ended with %v, want ErrReleased", err)
	}
	if armed.Load() {
		t.Fatal("the release's reply was not dropped: the test did not run its schedule")
	}
}
