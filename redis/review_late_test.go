package redis_test

// Adversarial review of the late-request change: schedules in which a copy
// of a request that go-redis resent (or whose first copy was held up in
// the network) lands after the outcome the client acted on.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// A TryAcquire whose first copy is held up in the network: go-redis resends
// it after its read timeout on a new connection, the resend finds the key
// held by B and the attempt reports ErrNotAcquired, so nothing gives it
// back. B releases; then the first copy lands on a free key and takes it
// for an attempt nobody holds: the key is stranded for the attempt's whole
// TTL (30 s here), far past the give-back bound, and Inspect shows a
// holder that does not exist.
// (DESIGN: "nothing a failed attempt leaves behind (a late release, a lost
// reply) can match a later attempt"; "no key stranded by a failed attempt
// for longer than the give-back bound"; "a request that lands late can
// never ... re-take".)
func TestReviewLateCopyOfHeldOutAttemptStrandsKey(t *testing.T) {
	srv := testserver.Redis(t)
	px := testutil.NewDelayProxy(t, srv.Addr(), lateDelay)
	a := resendingLocker(t, px.Addr())
	b := newLocker(t, srv.Addr())
	const key = "review-late-held-out"
	ctx := t.Context()
	loadScripts(t, a, "review-late-held-out-warm")
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

// A lease whose acquire's first copy is held up (go-redis's resend granted
// it) loses its lock on the server early (a server clock step, which the
// backend now declares: emulated by PEXPIRE as in clock_test.go). Its next
// Refresh is told "not ours" and the lease ends lost, on the server's word,
// so nothing is given back and no tombstone is left. The held first copy of
// the acquire then lands on the free key and takes it again for the ended
// lease, for its whole TTL (30 s): the later refresh's decision is undone
// by an earlier request of the same lease.
func TestReviewLateAcquireCopyRetakesLeaseLostOnServer(t *testing.T) {
	srv := testserver.Redis(t)
	px := testutil.NewDelayProxy(t, srv.Addr(), lateDelay)
	a := resendingLocker(t, px.Addr())
	b := newLocker(t, srv.Addr())
	const key = "review-late-lost-on-server"
	ctx := t.Context()
	loadScripts(t, a, "review-late-lost-on-server-warm")
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

// Observation (key space): every release now leaves a tombstone for TTL +
// 5 s, one per owner, so one hot key taken and released N times within a
// TTL keeps N extra keys in its slot (a Cluster slot that cannot be split).
// Before the change a plain release left none. The bound is releases per
// second × (TTL + 5 s); with the default 30 s TTL a key handed over 1,000
// times a second carries 35,000 tombstones.
func TestReviewLateTombstonesPerHotKey(t *testing.T) {
	srv := testserver.Redis(t)
	a := newLocker(t, srv.Addr())
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	used := func() int64 {
		var n int64
		info, err := admin.InfoMap(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Sscan(info["Memory"]["used_memory"], &n)
		return n
	}
	before := used()
	const n = 2000
	for range n {
		ls, err := a.TryAcquire(ctx, "hot")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := admin.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acquire/release cycles of one key: %d keys, %d bytes more", n, keys, used()-before)
	if keys > 10 {
		t.Fatalf("one key released %d times holds %d keys in its slot for TTL + 5 s", n, keys)
	}
}
