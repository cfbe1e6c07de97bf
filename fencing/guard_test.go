package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/memory"
)

func testStaleRejected(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "stale"
	if err := write(ctx, pool, r, fence(5), "by 5"); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := fencing.WithGuard(ctx, pool, r, fence(4), func(tx pgx.Tx) error { ran = true; return nil })
	wantStale(t, err, 4, 5)
	if ran {
		t.Fatal("fn ran although the guard refused the token")
	}
	if err := write(ctx, pool, r, fence(3), "by 3"); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("want ErrStaleToken, got %v", err)
	}
	if got := value(t, pool, r); got != "by 5" {
		t.Fatalf("data = %q, want the newer holder's %q", got, "by 5")
	}
	if got := stored(t, pool, r); got != 5 {
		t.Fatalf("fence = %d, want 5", got)
	}

	// Guard in the caller's own transaction: same verdict, and the
	// transaction is still usable for the rollback.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantStale(t, fencing.Guard(ctx, tx, r, fence(1)), 1, 5)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, pool, r, fence(6), "by 6"); err != nil {
		t.Fatalf("newer token after a stale one: %v", err)
	}
	if got := value(t, pool, r); got != "by 6" {
		t.Fatalf("data = %q, want %q", got, "by 6")
	}
}

// testEqualSameHolder: one holder may write many times with its token.
func testEqualSameHolder(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "equal-same"
	a := distlock.Fence{Token: 7, Holder: "a"}
	for i, v := range []string{"first", "second"} {
		if err := write(ctx, pool, r, a, v); err != nil {
			t.Fatalf("write %d with the same fence: %v", i+1, err)
		}
	}
	if got := value(t, pool, r); got != "second" {
		t.Fatalf("data = %q, want %q", got, "second")
	}
	// The holder is recorded beside the token: what the next check needs.
	if got := storedFence(t, pool, r); got != a {
		t.Fatalf("fence row = %+v, want %+v", got, a)
	}
	// A larger token passes from anyone, and then the old one is stale,
	// even from the holder that wrote it.
	b := distlock.Fence{Token: 8, Holder: "b"}
	if err := write(ctx, pool, r, b, "newer"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, write(ctx, pool, r, a, "old again"), 7, 8)
	if got := storedFence(t, pool, r); got != b {
		t.Fatalf("fence row = %+v, want %+v", got, b)
	}
}

// testEqualOtherHolder: a backend that hands a token out twice
// must not get both holders past the fence.
func testEqualOtherHolder(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "equal-other"
	a := distlock.Fence{Token: 7, Holder: "a"}
	b := distlock.Fence{Token: 7, Holder: "b"}
	if err := write(ctx, pool, r, a, "by a"); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := fencing.WithGuard(ctx, pool, r, b, func(tx pgx.Tx) error { ran = true; return nil })
	wantOtherHolder(t, err, b, a)
	if ran {
		t.Fatal("fn ran although the guard refused the fence")
	}
	// Guard in the caller's own transaction: same verdict.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantOtherHolder(t, fencing.Guard(ctx, tx, r, b), b, a)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := value(t, pool, r); got != "by a" {
		t.Fatalf("data = %q, want %q", got, "by a")
	}
	if got := storedFence(t, pool, r); got != a {
		t.Fatalf("fence row = %+v, want %+v (the refused holder must not take it)", got, a)
	}
	// The holder that wrote first keeps its token.
	if err := write(ctx, pool, r, a, "by a again"); err != nil {
		t.Fatalf("first holder's second write: %v", err)
	}
}

// counterLost is a lock service that lost its token counter in a restart
// and seeds it again without a clock: it hands out token 1 again.
type counterLost struct{ driver.Backend }

func (c counterLost) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := c.Backend.TryLock(ctx, r)
	g.Token = 1
	return g, err
}

// testRepeatedTokenLeases plays a repeated token with real leases: a lock
// service that lost its counter (two memory stores, as a server before and
// after a restart, each seeding its counter at 1) gives a second holder the
// same token. The holder ids from Lease.Fence must tell them apart.
func testRepeatedTokenLeases(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "repeated-token"
	acquire := func() *distlock.Lease {
		l, err := distlock.New(counterLost{memory.NewBackend(memory.NewStore())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	before, after := acquire(), acquire()
	if before.Token() != after.Token() {
		t.Fatalf("tokens %d and %d: the scenario needs a repeated token", before.Token(), after.Token())
	}
	if before.Fence().Holder == after.Fence().Holder {
		t.Fatalf("two leases share the holder id %q", before.Fence().Holder)
	}
	if err := write(ctx, pool, key, before.Fence(), "before"); err != nil {
		t.Fatal(err)
	}
	wantOtherHolder(t, write(ctx, pool, key, after.Fence(), "after"), after.Fence(), before.Fence())
	if got := value(t, pool, key); got != "before" {
		t.Fatalf("data = %q, want only the first holder's write", got)
	}
}

// testGuardIsOneStatement: the accepted path costs one statement inside the
// caller's transaction, equal token or larger.
func testGuardIsOneStatement(t *testing.T, dsn string) {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var stmts stmtCounter
	cfg.Tracer = &stmts
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, f := range []distlock.Fence{fence(1), fence(1), fence(2)} {
		before := stmts.n.Load()
		if err := fencing.Guard(ctx, tx, "one-statement", f); err != nil {
			t.Fatal(err)
		}
		if n := stmts.n.Load() - before; n != 1 {
			t.Fatalf("guard with %+v sent %d statements, want 1", f, n)
		}
	}
}

func testRollbackOnError(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "rollback-error"
	if err := write(ctx, pool, r, fence(1), "kept"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := fencing.WithGuard(ctx, pool, r, fence(10), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE data SET value = 'lost' WHERE resource = $1`, r); err != nil {
			return err
		}
		return fmt.Errorf("wrapped: %w", boom)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("want fn's error back, got %v", err)
	}
	if got := value(t, pool, r); got != "kept" {
		t.Fatalf("data = %q after a failed fn, want %q", got, "kept")
	}
	// The fence rolled back too: token 10 never committed, so 2 still passes.
	if got := stored(t, pool, r); got != 1 {
		t.Fatalf("fence = %d after a failed fn, want 1", got)
	}
	if err := write(ctx, pool, r, fence(2), "after"); err != nil {
		t.Fatal(err)
	}
}

func testRollbackOnPanic(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "rollback-panic"
	if err := write(ctx, pool, r, fence(1), "kept"); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the panic to go on", p)
			}
		}()
		_ = fencing.WithGuard(ctx, pool, r, fence(10), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE data SET value = 'lost' WHERE resource = $1`, r); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if got := value(t, pool, r); got != "kept" {
		t.Fatalf("data = %q after a panic, want %q", got, "kept")
	}
	if got := stored(t, pool, r); got != 1 {
		t.Fatalf("fence = %d after a panic, want 1", got)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the panic", n)
	}
}

func testConnAndTx(t *testing.T, pool *pgxpool.Pool, dsn string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const r = "conn-and-tx"
	if err := write(ctx, conn, r, fence(3), "via conn"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, write(ctx, conn, r, fence(2), "stale via conn"), 2, 3)

	// Inside an outer transaction WithGuard uses a savepoint: nothing is
	// visible to others until the outer commit.
	outer, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, outer, r, fence(4), "via tx"); err != nil {
		t.Fatal(err)
	}
	if got := value(t, pool, r); got != "via conn" {
		t.Fatalf("outer tx not committed yet, but others see %q", got)
	}
	if err := outer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := value(t, pool, r); got != "via tx" {
		t.Fatalf("data = %q, want %q", got, "via tx")
	}
}

func testCustomTable(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE SCHEMA "my schema"`)
	// A name that would break naive string building.
	tbl, err := fencing.NewTable("my schema", `fence"; DROP TABLE data; --`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tbl.DDL(), tbl.Name()) {
		t.Fatalf("DDL %q does not use the table name %s", tbl.DDL(), tbl.Name())
	}
	for range 2 {
		if err := tbl.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	const r = "custom"
	fn := func(pgx.Tx) error { return nil }
	if err := tbl.WithGuard(ctx, pool, r, fence(9), fn); err != nil {
		t.Fatal(err)
	}
	wantStale(t, tbl.WithGuard(ctx, pool, r, fence(8), fn), 8, 9)
	// The default table has no fence for r: the tables are separate.
	if err := fencing.WithGuard(ctx, pool, r, fence(1), fn); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM data`).Scan(&n); err != nil {
		t.Fatalf("data table gone? %v", err)
	}
}
