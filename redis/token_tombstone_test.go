package redis_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// Tokens strictly increase across releases and re-acquires that follow
// each other within the same millisecond (or microsecond), on one Locker
// and alternating between two.
func TestTokensIncreaseAcrossQuickHandOffs(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	ls := []distlock.Locker{newLocker(t, srv.Addr()), newLocker(t, srv.Addr(), redis.WithoutFairQueue())}
	var last distlock.Token
	for i := range 2000 {
		l, err := ls[i%2].TryAcquire(ctx, "quick", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("acquire %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A counter ahead of the clock (the KEEPTTL + INCR path) advances by one
// and keeps the life the SET … PX gave it (the lock's TTL and
// CounterLinger), not the shorter expiry it had: a second acquire after
// that old expiry still goes one past.
func TestTokenCounterAheadKeepsItsLife(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	k := redisnode.KeysFor(redis.DefaultPrefix, "ahead")
	ahead := time.Now().Add(24*time.Hour).UnixMicro() + 12345
	if err := admin.Set(ctx, k.Counter, strconv.FormatInt(ahead, 10), 1500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, srv.Addr())
	la, err := l.TryAcquire(ctx, "ahead", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if int64(la.Token()) != ahead+1 {
		t.Fatalf("token %d over a counter at %d; want %d", la.Token(), ahead, ahead+1)
	}
	life := time.Minute + redisnode.CounterLinger
	if p := admin.PTTL(ctx, k.Counter).Val(); p < life-5*time.Second || p > life {
		t.Fatalf("counter PTTL %v after an acquire over a counter ahead of the clock; want about %v", p, life)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1600 * time.Millisecond) // past the counter's old expiry
	lb, err := l.TryAcquire(ctx, "ahead", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() != la.Token()+1 {
		t.Fatalf("tokens %d then %d; want one apart (the counter kept)", la.Token(), lb.Token())
	}
	_ = lb.Release(ctx)
	// A counter without expiry (written by hand, or by an older version)
	// gets one.
	if err := admin.Persist(ctx, k.Counter).Err(); err != nil {
		t.Fatal(err)
	}
	lc, err := l.TryAcquire(ctx, "ahead", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if lc.Token() != lb.Token()+1 {
		t.Fatalf("tokens %d then %d", lb.Token(), lc.Token())
	}
	if p := admin.PTTL(ctx, k.Counter).Val(); p <= 0 || p > life {
		t.Fatalf("counter PTTL %v; want at most %v", p, life)
	}
}

// The counter expiring while a lock is held (its life ran out first: a
// lease refreshed past CounterLinger) does not let a later token fall
// below the held one's, and a plain acquire gives the counter its life.
func TestTokenAfterCounterExpiredUnderHeldLock(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	k := redisnode.KeysFor(redis.DefaultPrefix, "expired-counter")
	l := newLocker(t, srv.Addr())
	la, err := l.TryAcquire(ctx, "expired-counter", distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	life := 10*time.Second + redisnode.CounterLinger
	if p := admin.PTTL(ctx, k.Counter).Val(); p < life-5*time.Second || p > life {
		t.Fatalf("counter PTTL %v after an acquire; want about %v", p, life)
	}
	admin.Del(ctx, k.Counter) // as if expired
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := l.TryAcquire(ctx, "expired-counter", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d after the counter expired under token %d", lb.Token(), la.Token())
	}
	_ = lb.Release(ctx)
}

// mark() never shortens a tombstone: a release (plain and fair) of a lock
// whose owner already has a longer tombstone (Redlock's "refused", a
// give-back's TTL + MaxLate) keeps its expiry, and a late acquire copy
// after the release takes nothing.
func TestReleaseTombstoneNeverShortened(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	admin := newClient(t, srv.Addr())
	k := redisnode.KeysFor(redis.DefaultPrefix, "tomb")
	const long = time.Minute
	check := func(owner, want string) {
		t.Helper()
		g := k.GoneFor(owner)
		if v := admin.Get(ctx, g).Val(); v != want {
			t.Errorf("%s: tombstone %q, want %q", owner, v, want)
		}
		if p := admin.PTTL(ctx, g).Val(); p < long-5*time.Second {
			t.Errorf("%s: tombstone shortened to %v (was %v)", owner, p, long)
		}
	}
	for i, fair := range []bool{false, true} {
		rel := func(owner string, tomb time.Duration) bool {
			var ok bool
			var err error
			if fair {
				ok, err = redisnode.ReleaseFairOn(ctx, admin, k, owner, tomb, false, redis.DefaultFairWindow)
			} else {
				ok, err = redisnode.ReleaseOn(ctx, admin, k, owner, tomb, false)
			}
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		p := strconv.Itoa(i)
		// Ours, with a longer tombstone already there.
		admin.Set(ctx, k.Lock, "held"+p, time.Minute)
		admin.Set(ctx, k.GoneFor("held"+p), "refused", long)
		if !rel("held"+p, redisnode.MaxLate) {
			t.Fatal("release of our lock reported not ours")
		}
		check("held"+p, "1")
		if r, err := redisnode.AcquireOn(ctx, admin, k, "held"+p, time.Minute, ""); err != nil || r.Acquired {
			t.Fatalf("late acquire copy after the release: %+v, %v", r, err)
		}
		// Not ours, after a refused attempt with a longer memory.
		admin.Set(ctx, k.GoneFor("other"+p), "refused", long)
		if rel("other"+p, redisnode.MaxLate) {
			t.Fatal("release of a lock never ours reported ours")
		}
		check("other"+p, "0")
		// A give-back's long tombstone, then a resent short release.
		if rel("gb"+p, long) || rel("gb"+p, redisnode.MaxLate) {
			t.Fatal("give-back of nothing reported a release")
		}
		check("gb"+p, "0")
	}
	if admin.Exists(ctx, k.Lock).Val() != 0 {
		t.Fatal("lock set by a late copy")
	}
}
