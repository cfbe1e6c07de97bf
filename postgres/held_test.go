package postgres_test

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

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/postgres"
)

// Storms: two Lockers on separate pools; brand-new keys and expired rows
// raced by 8 attempts at once give exactly one winner; tokens rise.
func TestExclusionStorms(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	bs := []driver.Backend{rawBackend(t, newPool(t, dsn), postgres.WithNotify(false)), rawBackend(t, newPool(t, dsn), postgres.WithNotify(false))}
	race := func(key string) (winners int, tokens []int64) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := make(chan struct{})
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				g, err := bs[i%2].TryLock(ctx, driver.Request{Key: key, TTL: time.Minute, Owner: fmt.Sprintf("%s-%d", key, i)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners++
					tokens = append(tokens, g.Token)
				case !errors.Is(err, distlock.ErrNotAcquired):
					t.Errorf("%s: %v", key, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		return
	}
	var last int64
	for round := range 30 {
		if w, _ := race(fmt.Sprintf("new-%d", round)); w != 1 {
			t.Fatalf("brand-new key: %d winners", w)
		}
		if round > 0 {
			mustExec(t, admin, `UPDATE distlock_locks SET expires_at = clock_timestamp() - interval '1 ms' WHERE key = 'exp'`)
		}
		w, tok := race("exp")
		if w != 1 {
			t.Fatalf("expired row: %d winners", w)
		}
		if tok[0] <= last {
			t.Fatalf("token %d after %d", tok[0], last)
		}
		last = tok[0]
	}
	// Locker level: never two holders at once.
	l1, l2 := newLocker(t, newPool(t, dsn)), newLocker(t, newPool(t, dsn))
	var holders, maxHolders atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		l := l1
		if i%2 == 0 {
			l = l2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 30 {
				ls, err := l.Acquire(ctx, "storm", distlock.WithTTL(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				if n := holders.Add(1); n > maxHolders.Load() {
					maxHolders.Store(n)
				}
				holders.Add(-1)
				_ = ls.Release(ctx)
			}
		}()
	}
	wg.Wait()
	if maxHolders.Load() > 1 {
		t.Fatalf("%d holders at once", maxHolders.Load())
	}
}

// Tokens rise across a give-back row (token 0), releases, and a restart;
// late refresh/release of an older grant touch nothing.
func TestTokensAndLateStatements(t *testing.T) {
	t.Parallel()
	s := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	ctx := t.Context()
	admin := newPool(t, s.DSN())
	if err := postgres.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	b := rawBackend(t, newPool(t, s.DSN()), postgres.WithNotify(false))
	grant := func(owner string) driver.Grant {
		t.Helper()
		var g driver.Grant
		var err error
		for range 50 { // after a restart the pool may need a retry
			g, err = b.TryLock(ctx, driver.Request{Key: "t", TTL: time.Minute, Owner: owner})
			if err == nil {
				g.Key, g.Owner, g.TTL = "t", owner, time.Minute
				return g
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatal(err)
		return g
	}
	if err := b.Unlock(ctx, driver.Grant{Key: "t", Owner: "gb"}); err != nil { // inserts token 0
		t.Fatal(err)
	}
	g1 := grant("o1")
	if err := b.Unlock(ctx, g1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Refresh(ctx, g1, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("late refresh after release: %v", err)
	}
	g2 := grant("o2")
	if err := b.Unlock(ctx, g1); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("late release after a new grant: %v", err)
	}
	if _, err := b.Refresh(ctx, g1, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("late refresh after a new grant: %v", err)
	}
	if err := b.Unlock(ctx, driver.Grant{Key: "t", Owner: "o1"}); err != nil { // give-back of an old owner
		t.Fatal(err)
	}
	if h, _ := b.Inspect(ctx, "t"); !h.Held || h.Token != g2.Token {
		t.Fatalf("g2 disturbed: %+v", h)
	}
	_ = b.Unlock(ctx, g2)
	mustExec(t, admin, `UPDATE distlock_locks SET token = token + 10000000000 WHERE key = 't'`) // a token far ahead of the clock
	g3 := grant("o3")
	_ = b.Unlock(ctx, g3)
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	g4 := grant("o4")
	if !(g1.Token < g2.Token && g2.Token < g3.Token && g3.Token < g4.Token) || g3.Token < g2.Token+10000000000 {
		t.Fatalf("tokens %d %d %d %d", g1.Token, g2.Token, g3.Token, g4.Token)
	}
}

// Notices: a waiter whose LISTEN connection is terminated still gets the
// key soon after the release; Close leaves no goroutine behind.
func TestListenerKilledAndClose(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	dsn, admin := server(t)
	ctx := t.Context()
	before := runtime.NumGoroutine()
	pool := newPool(t, dsn)
	holder := newLocker(t, pool)
	l, err := postgres.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := holder.TryAcquire(ctx, "k", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		w, err := l.Acquire(ctx, "k", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = w.Release(ctx)
	}()
	time.Sleep(500 * time.Millisecond)
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'`).Scan(&n); err != nil || n == 0 {
		t.Fatalf("no LISTEN backend: %d %v", n, err)
	}
	time.Sleep(300 * time.Millisecond)
	rel := time.Now()
	_ = ls.Release(ctx)
	if d := (<-got).Sub(rel); d > 3*time.Second {
		t.Fatalf("waiter granted %v after the release", d)
	}
	// A second wait subscribes again, then Close while it waits.
	ls, _ = holder.TryAcquire(ctx, "k2", distlock.WithTTL(30*time.Second))
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(wctx, "k2"); done <- err }()
	time.Sleep(500 * time.Millisecond)
	_ = l.Close()
	<-done
	_ = ls.Release(ctx)
	_ = holder.Close()
	pool.Close()
	time.Sleep(500 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+2 {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines %d -> %d\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// Errors and inputs: no secret in Open's errors; injection through the
// table name refused; MaxKeyLen keys of odd runes and MaxValueLen values
// of arbitrary bytes round-trip; a killed server is ErrUnavailable.
func TestErrorsAndInputs(t *testing.T) {
	t.Parallel()
	s := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	ctx := t.Context()
	admin := newPool(t, s.DSN())
	for _, u := range []string{
		"postgres://u:s3cr3tpw@127.0.0.1:1/db?sslmode=bogus",
		"postgres://u:s3cr3tpw@127.0.0.1:99999/db",
		"postgres://u:s3cr3tpw@[::1/db",
		"postgres://u:s3cr3tpw@127.0.0.1:1/db?password=s3cr3tpw&connect_timeout=1",
		"postgres://u:s3cr%zzpw@127.0.0.1:1/db",
		"postgres://u:s3cr3tpw@127.0.0.1:1/db?table=x;drop",
		"postgres://u@127.0.0.1:1/db?sslpassword=s3cr3tpw&sslkey=/nonexistent&sslmode=require",
		"postgres://u:s3cr3tpw@127.0.0.1:1/db?pool_max_conns=abc",
	} {
		_, err := distlock.Open(ctx, u)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "zzpw") {
			t.Errorf("Open(%q) = %v", u, err)
		}
	}
	for _, bad := range []string{`x"; DROP TABLE t; --`, "a.b.c", "Locks", "a b", "a.", "x\n"} {
		if _, err := postgres.New(admin, postgres.WithTable(bad)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("WithTable(%q): %v", bad, err)
		}
	}
	if _, err := postgres.New(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("nil pool: %v", err)
	}
	if err := postgres.Migrate(ctx, admin, postgres.WithTable("select")); err != nil {
		t.Fatal(err)
	}
	l, err := postgres.New(admin, postgres.WithTable("select"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	key := strings.Repeat("ü'\"\\$%_", distlock.MaxKeyLen/9)
	val := make([]byte, distlock.MaxValueLen)
	for i := range val {
		val[i] = byte(i)
	}
	ls, err := l.TryAcquire(ctx, key, distlock.WithValue(string(val)))
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Inspect(ctx, key)
	if err != nil || h.Value != string(val) || h.Token != ls.Token() {
		t.Fatalf("inspect: %v %v", h.Token, err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = postgres.WithLease(ctx, admin, ls, func(pgx.Tx) error { return nil })
	if !errors.Is(err, postgres.ErrLeaseExpired) {
		t.Fatalf("released lease: %v", err)
	}
	_ = s.Kill()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := l.TryAcquire(tctx, "k"); !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("killed server: %v", err)
	}
}
