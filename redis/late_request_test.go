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
	"github.com/distlock/distlock/internal/redisnode"
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

// An attempt whose first copy is held up, and whose resend finds the key
// held, is refused: nothing gives it back, as its outcome seems known. Once
// the holder releases, the first copy lands on a free key: it must be
// refused too, not take the key for nobody for its TTL.
func TestLateCopyOfRefusedAttemptTakesNothing(t *testing.T) {
	srv := testserver.Redis(t)
	px := testutil.NewDelayProxy(t, srv.Addr(), lateDelay)
	a := resendingLocker(t, px.Addr())
	b := newLocker(t, srv.Addr())
	const key = "late-refused"
	ctx := t.Context()
	loadScripts(t, a, "late-refused-warm")
	lb, err := b.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	px.HoldNext(1, []byte(key+"}")) // A's attempt's first copy
	_, err = a.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("A's attempt (answered by the resent copy, B holding): %v, want ErrNotAcquired", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lateDelay + 300*time.Millisecond) // the late first copy landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("key stranded by the late copy of A's failed attempt (Inspect: held=%v ttl=%v token=%d): %v",
			h.Held, h.TTL.Round(time.Second), h.Token, err)
	}
	_ = lc.Release(context.WithoutCancel(ctx))
}

// A lease whose lock the server expired early (a server clock step: the
// PEXPIRE) learns it at its next refresh and ends lost. A late copy of its
// acquire must not take the key again afterwards: the lease is given back,
// which leaves its owner's tombstone.
func TestLateAcquireCopyAfterLossTakesNothing(t *testing.T) {
	srv := testserver.Redis(t)
	px := testutil.NewDelayProxy(t, srv.Addr(), lateDelay)
	a := resendingLocker(t, px.Addr())
	b := newLocker(t, srv.Addr())
	const key = "late-lost"
	ctx := t.Context()
	loadScripts(t, a, "late-lost-warm")
	px.HoldNext(1, []byte(key+"}"))
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("acquire (answered by the resent copy): %v", err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.PExpire(ctx, redisnode.KeysFor(redis.DefaultPrefix, key).Lock, 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := la.Refresh(ctx); !errors.Is(err, distlock.ErrLeaseLost) {
		t.Fatalf("refresh after the early expiry: %v, want ErrLeaseLost", err)
	}
	time.Sleep(lateDelay + 300*time.Millisecond) // the acquire's first copy landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("a lease that ended lost (%v) was taken again by its own late acquire copy (Inspect: held=%v token=%d ttl=%v; lease token %d): %v",
			la.Err(), h.Held, h.Token, h.TTL.Round(time.Second), la.Token(), err)
	}
	_ = lb.Release(context.WithoutCancel(ctx))
}

// A lease acquired for 30 s whose acquire's first copy is held up (4 s,
// within redisnode.MaxLate), shortened to 100 ms and released: the held copy
// landing after the release must take nothing. The tombstone's life does
// not depend on the lease's TTL, so a TTL shortened since the acquire does
// not shorten it.
func TestLateAcquireCopyAfterShortenedLeaseTakesNothing(t *testing.T) {
	srv := testserver.Redis(t)
	const delay = 4 * time.Second
	px := testutil.NewDelayProxy(t, srv.Addr(), delay)
	a := resendingLocker(t, px.Addr())
	b := newLocker(t, srv.Addr())
	const key = "late-shortened"
	ctx := t.Context()
	loadScripts(t, a, "late-shortened-warm")
	sent := time.Now()
	px.HoldNext(1, []byte(key+"}")) // the acquire's first copy
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second), distlock.WithValue("leader-A"))
	if err != nil {
		t.Fatalf("acquire (answered by the resent copy): %v", err)
	}
	if err := la.Refresh(ctx, distlock.WithTTL(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(sent.Add(delay + 400*time.Millisecond))) // the held copy landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, key)
	if err == nil {
		_ = lb.Release(context.WithoutCancel(ctx))
		return
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	t.Fatalf("A released (token %d) %v after sending its 30 s acquire; the held copy took the key for nobody: Inspect held=%v token=%d value=%q ttl=%v; B: %v",
		la.Token(), delay, h.Held, h.Token, h.Value, h.TTL.Round(time.Second), err)
}

// Every tombstone (a release, a refused attempt) lasts redisnode.MaxLate,
// whatever the lock's TTL: a key that is polled while held for an hour, and
// one released many times over, leave only short-lived keys behind.
func TestTombstonesLastMaxLate(t *testing.T) {
	srv := testserver.Redis(t)
	a := newLocker(t, srv.Addr())
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	for range 100 {
		ls, err := a.TryAcquire(ctx, "cycled", distlock.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := a.TryAcquire(ctx, "held", distlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.WithoutCancel(ctx))
	for range 100 {
		if _, err := a.TryAcquire(ctx, "held", distlock.WithTTL(time.Hour)); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatal(err)
		}
	}
	gone, err := admin.Keys(ctx, "*:gone:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 200 {
		t.Fatalf("%d tombstones, want one per release and per refused attempt (200)", len(gone))
	}
	for _, k := range gone {
		if d := admin.PTTL(ctx, k).Val(); d <= 0 || d > redisnode.MaxLate {
			t.Fatalf("tombstone %s lasts %v, want at most %v", k, d, redisnode.MaxLate)
		}
	}
}
