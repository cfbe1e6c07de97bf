package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/memory"
	"github.com/distlock/distlock/postgres"
)

func newLocker(t testing.TB, pool *pgxpool.Pool) distlock.Locker {
	t.Helper()
	l, err := postgres.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// setRow writes v to the data row inside the lease's transaction.
func setRow(ctx context.Context, pool *pgxpool.Pool, lease *distlock.Lease, v string) error {
	return postgres.WithLease(ctx, pool, lease, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE data SET v = $1 WHERE id = 1`, v)
		return err
	})
}

func dataRow(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var v string
	if err := pool.QueryRow(t.Context(), `SELECT v FROM data WHERE id = 1`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWithLease(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	mustExec(t, admin, `CREATE TABLE data (id int PRIMARY KEY, v text NOT NULL)`, `INSERT INTO data VALUES (1, 'initial')`)
	if err := fencing.Migrate(t.Context(), admin); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, dsn)
	t.Run("ExpiredBeforeAnyNewHolder", func(t *testing.T) { testExpiredBeforeNewHolder(t, pool) })
	t.Run("ExpiresDuringTransaction", func(t *testing.T) { testExpiresDuring(t, pool) })
	t.Run("Invalid", func(t *testing.T) { testWithLeaseInvalid(t, pool) })
}

// A paused holder's transaction is refused once its lease expired, though
// nobody else holds the key; a newer holder's commits, and the stale one
// stays refused, by WithLease and by the fence alike.
func testExpiredBeforeNewHolder(t *testing.T, pool *pgxpool.Pool) {
	ctx := t.Context()
	l := newLocker(t, pool)
	stale, err := l.TryAcquire(ctx, "job", distlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := setRow(ctx, pool, stale, "by the first holder"); err != nil {
		t.Fatalf("a live lease's transaction: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // the holder pauses past its TTL
	err = setRow(ctx, pool, stale, "stale, nobody newer")
	if !errors.Is(err, postgres.ErrLeaseExpired) || !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("expired lease, no newer holder: got %v, want ErrLeaseExpired", err)
	}
	if got := dataRow(t, pool); got != "by the first holder" {
		t.Fatalf("data = %q after a refused transaction", got)
	}

	next, err := l.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= stale.Token() {
		t.Fatalf("token %d after %d", next.Token(), stale.Token())
	}
	err = postgres.WithLease(ctx, pool, next, func(tx pgx.Tx) error {
		if err := fencing.Guard(ctx, tx, "job", next.Fence()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE data SET v = 'by the next holder' WHERE id = 1`)
		return err
	})
	if err != nil {
		t.Fatalf("the new holder's transaction: %v", err)
	}
	if err := setRow(ctx, pool, stale, "stale, after the newer"); !errors.Is(err, postgres.ErrLeaseExpired) {
		t.Fatalf("stale lease after a newer holder wrote: got %v", err)
	}
	err = fencing.WithGuard(ctx, pool, "job", stale.Fence(), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE data SET v = 'stale through the fence' WHERE id = 1`)
		return err
	})
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the fence let the stale holder write: %v", err)
	}
	if got := dataRow(t, pool); got != "by the next holder" {
		t.Fatalf("data = %q, want the next holder's", got)
	}
}

// A lease that expires while its transaction runs commits nothing, and no
// one is granted the key before that transaction ends.
func testExpiresDuring(t *testing.T, pool *pgxpool.Pool) {
	ctx := t.Context()
	a, b := newLocker(t, pool), newLocker(t, pool)
	lease, err := a.TryAcquire(ctx, "slow", distlock.WithTTL(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	granted := make(chan time.Time, 1)
	go func() {
		<-started
		ls, err := b.Acquire(ctx, "slow", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
			granted <- time.Time{}
			return
		}
		granted <- time.Now()
		ls.Release(ctx)
	}()
	err = postgres.WithLease(ctx, pool, lease, func(tx pgx.Tx) error {
		close(started)
		time.Sleep(700 * time.Millisecond) // past the TTL, inside the transaction
		_, err := tx.Exec(ctx, `UPDATE data SET v = 'too late' WHERE id = 1`)
		return err
	})
	ended := time.Now()
	if !errors.Is(err, postgres.ErrLeaseExpired) {
		t.Fatalf("a lease that expired inside its transaction committed: %v", err)
	}
	if got := dataRow(t, pool); got == "too late" {
		t.Fatal("the expired lease's write is in the table")
	}
	if at := <-granted; at.Before(ended.Add(-50 * time.Millisecond)) {
		t.Fatalf("the key was granted %v before the lease's transaction ended", ended.Sub(at))
	}
}

// Waiting Acquires take the key in the order they came.
func TestFirstComeOrder(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	pool := newPool(t, dsn)
	holder := newLocker(t, pool)
	held, err := holder.TryAcquire(ctx, "fifo", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	for i := range n {
		l := newLocker(t, newPool(t, dsn))
		go func() {
			ls, err := l.Acquire(ctx, "fifo", distlock.WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
				order <- -1
				return
			}
			order <- i
			time.Sleep(20 * time.Millisecond) // a later waiter tries meanwhile
			_ = ls.Release(ctx)
		}()
		deadline := time.Now().Add(10 * time.Second)
		for { // the next waiter starts once this one is queued
			h, err := holder.Inspect(ctx, "fifo")
			if err == nil && h.Waiters == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d not queued: %+v, %v", i, h, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range n {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d, want the waiters in the order they came", want, got)
		}
	}
}

func testWithLeaseInvalid(t *testing.T, pool *pgxpool.Pool) {
	ctx := t.Context()
	mem, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	other, err := mem.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	noop := func(pgx.Tx) error { return nil }
	for name, err := range map[string]error{
		"nil lease":         postgres.WithLease(ctx, pool, nil, noop),
		"nil function":      postgres.WithLease(ctx, pool, other, nil),
		"nil db":            postgres.WithLease(ctx, nil, other, noop),
		"another backend's": postgres.WithLease(ctx, pool, other, noop),
	} {
		if !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		}
	}
}

func mustExec(t testing.TB, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := pool.Exec(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
