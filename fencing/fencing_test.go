package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/memory"
)

// The three database handles users have all fit the small interfaces.
var (
	_ fencing.Beginner = (*pgxpool.Pool)(nil)
	_ fencing.Beginner = (*pgx.Conn)(nil)
	_ fencing.Beginner = pgx.Tx(nil)
)

// TestFencing starts one PostgreSQL for all subtests: a server start costs
// more than every subtest together.
func TestFencing(t *testing.T) {
	s := testserver.Postgres(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := fencing.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := fencing.Migrate(ctx, pool); err != nil {
		t.Fatalf("second Migrate should be a no-op: %v", err)
	}
	mustExec(t, pool, `CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, n bigint NOT NULL DEFAULT 0)`)

	t.Run("StaleRejected", func(t *testing.T) { testStaleRejected(t, pool) })
	t.Run("EqualAccepted", func(t *testing.T) { testEqualAccepted(t, pool) })
	t.Run("RollbackOnError", func(t *testing.T) { testRollbackOnError(t, pool) })
	t.Run("RollbackOnPanic", func(t *testing.T) { testRollbackOnPanic(t, pool) })
	t.Run("ConnAndTx", func(t *testing.T) { testConnAndTx(t, pool, s.DSN()) })
	t.Run("CustomTable", func(t *testing.T) { testCustomTable(t, pool) })
	t.Run("ConcurrentCounter", func(t *testing.T) { testConcurrentCounter(t, pool) })
	t.Run("MemoryLockPause", func(t *testing.T) { testMemoryLockPause(t, pool) })
	t.Run("Timeline", func(t *testing.T) { testTimeline(t, pool) })
	t.Run("UpdateRow", func(t *testing.T) { testUpdateRow(t, pool) })
	t.Run("UpdateRowConcurrent", func(t *testing.T) { testUpdateRowConcurrent(t, pool) })
	t.Run("Invalid", func(t *testing.T) { testInvalid(t, pool) })
	t.Run("CancelledContext", func(t *testing.T) { testCancelled(t, pool) })
}

func mustExec(t testing.TB, db fencing.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// write is a guarded transaction that sets resource's data row to value.
func write(ctx context.Context, db fencing.Beginner, resource string, token distlock.Token, value string) error {
	return fencing.WithGuard(ctx, db, resource, token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO data (resource, value) VALUES ($1, $2)
			ON CONFLICT (resource) DO UPDATE SET value = excluded.value`, resource, value)
		return err
	})
}

func value(t testing.TB, db fencing.DB, resource string) string {
	t.Helper()
	var v string
	err := db.QueryRow(context.Background(), `SELECT value FROM data WHERE resource = $1`, resource).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func stored(t testing.TB, db fencing.DB, resource string) distlock.Token {
	t.Helper()
	var tok int64
	err := db.QueryRow(context.Background(), `SELECT token FROM distlock_fence WHERE resource = $1`, resource).Scan(&tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return distlock.Token(tok)
}

func wantStale(t testing.TB, err error, token, storedTok distlock.Token) {
	t.Helper()
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("want ErrStaleToken, got %v", err)
	}
	var se *fencing.StaleTokenError
	if !errors.As(err, &se) {
		t.Fatalf("want a *StaleTokenError, got %T: %v", err, err)
	}
	if se.Token != token || se.Stored != storedTok {
		t.Fatalf("StaleTokenError{Token: %d, Stored: %d}, want {%d, %d}", se.Token, se.Stored, token, storedTok)
	}
}

func testStaleRejected(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "stale"
	if err := write(ctx, pool, r, 5, "by 5"); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := fencing.WithGuard(ctx, pool, r, 4, func(tx pgx.Tx) error { ran = true; return nil })
	wantStale(t, err, 4, 5)
	if ran {
		t.Fatal("fn ran although the guard refused the token")
	}
	if err := write(ctx, pool, r, 3, "by 3"); !errors.Is(err, fencing.ErrStaleToken) {
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
	wantStale(t, fencing.Guard(ctx, tx, r, 1), 1, 5)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, pool, r, 6, "by 6"); err != nil {
		t.Fatalf("newer token after a stale one: %v", err)
	}
	if got := value(t, pool, r); got != "by 6" {
		t.Fatalf("data = %q, want %q", got, "by 6")
	}
}

func testEqualAccepted(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "equal"
	for i, v := range []string{"first", "second"} {
		if err := write(ctx, pool, r, 7, v); err != nil {
			t.Fatalf("write %d with the same token: %v", i+1, err)
		}
	}
	if got := value(t, pool, r); got != "second" {
		t.Fatalf("data = %q, want %q", got, "second")
	}
	if err := write(ctx, pool, r, 8, "newer"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, write(ctx, pool, r, 7, "old again"), 7, 8)
}

func testRollbackOnError(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "rollback-error"
	if err := write(ctx, pool, r, 1, "kept"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := fencing.WithGuard(ctx, pool, r, 10, func(tx pgx.Tx) error {
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
	if err := write(ctx, pool, r, 2, "after"); err != nil {
		t.Fatal(err)
	}
}

func testRollbackOnPanic(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "rollback-panic"
	if err := write(ctx, pool, r, 1, "kept"); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the panic to go on", p)
			}
		}()
		_ = fencing.WithGuard(ctx, pool, r, 10, func(tx pgx.Tx) error {
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
	if err := write(ctx, conn, r, 3, "via conn"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, write(ctx, conn, r, 2, "stale via conn"), 2, 3)

	// Inside an outer transaction WithGuard uses a savepoint: nothing is
	// visible to others until the outer commit.
	outer, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, outer, r, 4, "via tx"); err != nil {
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
	if err := tbl.WithGuard(ctx, pool, r, 9, fn); err != nil {
		t.Fatal(err)
	}
	wantStale(t, tbl.WithGuard(ctx, pool, r, 8, fn), 8, 9)
	// The default table has no fence for r: the tables are separate.
	if err := fencing.WithGuard(ctx, pool, r, 1, fn); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM data`).Scan(&n); err != nil {
		t.Fatalf("data table gone? %v", err)
	}
}

// testConcurrentCounter runs many holders with ever larger tokens at once —
// what happens when locks change hands while old holders still run. Each
// does a read-modify-write of a counter inside WithGuard, pausing between
// read and write. The guard must serialise them: the counter must equal the
// number of commits, whatever got rejected.
func testConcurrentCounter(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "counter"
	mustExec(t, pool, `INSERT INTO data (resource, value, n) VALUES ($1, '', 0)`, r)
	const workers, rounds = 12, 15
	var next atomic.Int64
	var accepted, stale atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range rounds {
				token := distlock.Token(next.Add(1))
				err := fencing.WithGuard(ctx, pool, r, token, func(tx pgx.Tx) error {
					var n int64
					if err := tx.QueryRow(ctx, `SELECT n FROM data WHERE resource = $1`, r).Scan(&n); err != nil {
						return err
					}
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					_, err := tx.Exec(ctx, `UPDATE data SET n = $2 WHERE resource = $1`, r, n+1)
					return err
				})
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, fencing.ErrStaleToken):
					stale.Add(1)
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n int64
	if err := pool.QueryRow(ctx, `SELECT n FROM data WHERE resource = $1`, r).Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits, %d stale rejections, counter %d", accepted.Load(), stale.Load(), n)
	if accepted.Load()+stale.Load() != workers*rounds {
		t.Fatalf("%d + %d outcomes, want %d", accepted.Load(), stale.Load(), workers*rounds)
	}
	if accepted.Load() == 0 {
		t.Fatal("no transaction committed")
	}
	if n != accepted.Load() {
		t.Fatalf("counter = %d but %d transactions committed: lost updates", n, accepted.Load())
	}
	if got := stored(t, pool, r); got > distlock.Token(next.Load()) || got <= 0 {
		t.Fatalf("fence = %d, outside the tokens handed out (1..%d)", got, next.Load())
	}
}

// testMemoryLockPause is the story the guard exists for, with a real lock:
// A's lease runs out while A is paused, B takes the lock and writes, then A
// wakes and writes. A's write must be refused and the data must show B's.
func testMemoryLockPause(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memory.NewStore()
	clientA, err := memory.New(memory.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	defer clientA.Close()
	clientB, err := memory.New(memory.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	defer clientB.Close()

	const key = "memory-pause"
	a, err := clientA.TryAcquire(ctx, key, distlock.WithTTL(200*time.Millisecond)) // no auto-renew
	if err != nil {
		t.Fatal(err)
	}
	// A "pauses" until its lease is gone; nothing in A notices.
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("A's lease never expired")
	}
	b, err := clientB.Acquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	if err := write(ctx, pool, key, b.Token(), "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// A wakes and writes with the token it still has.
	wantStale(t, write(ctx, pool, key, a.Token(), "A"), a.Token(), b.Token())
	if got := value(t, pool, key); got != "B" {
		t.Fatalf("data = %q, want B's write only", got)
	}

	// Control: the same late write without the guard lands, so the
	// scenario above is a real hazard and not a no-op.
	mustExec(t, pool, `UPDATE data SET value = 'A' WHERE resource = $1`, key)
	if got := value(t, pool, key); got != "A" {
		t.Fatalf("unguarded control: data = %q, want A's stale overwrite", got)
	}
}

// testTimeline replays the package doc's timeline with the row form: a fence
// checked only at write time loses A's update; claiming the fence before
// reading does not.
func testTimeline(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)`)
	row := func(id int, set ...fencing.Column) fencing.RowUpdate {
		return fencing.RowUpdate{Table: pgx.Identifier{"accounts"}, Fence: "fence",
			Key: []fencing.Column{{Name: "id", Value: id}}, Set: set}
	}
	balance := func(id int) int64 {
		var b int64
		if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, id).Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	const a, b = distlock.Token(33), distlock.Token(34)

	// Fence at write time only: both writes pass, A's +10 is lost.
	mustExec(t, pool, `INSERT INTO accounts VALUES (1, 100, 32)`)
	readByB := balance(1)
	if err := fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: balance(1) + 10}), a); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	if err := fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: readByB + 50}), b); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if got := balance(1); got != 150 {
		t.Fatalf("late-check balance = %d; the doc's timeline says 150 (A's +10 lost)", got)
	}

	// Fence first: B claims right after acquiring, then reads; A is refused.
	mustExec(t, pool, `INSERT INTO accounts VALUES (2, 100, 32)`)
	if err := fencing.UpdateRow(ctx, pool, row(2), b); err != nil {
		t.Fatalf("B's claim: %v", err)
	}
	readByB = balance(2)
	wantStale(t, fencing.UpdateRow(ctx, pool, row(2, fencing.Column{Name: "balance", Value: balance(2) + 10}), a), a, b)
	if err := fencing.UpdateRow(ctx, pool, row(2, fencing.Column{Name: "balance", Value: readByB + 50}), b); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if got := balance(2); got != 150 {
		t.Fatalf("fence-first balance = %d, want 150", got)
	}
}

func testUpdateRow(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE "Hot Rows" ("Id" text, k2 int, v text, "fence col" bigint, PRIMARY KEY ("Id", k2))`)
	mustExec(t, pool, `INSERT INTO "Hot Rows" VALUES ('x', 1, 'init', NULL)`)
	row := func(id string, v string) fencing.RowUpdate {
		u := fencing.RowUpdate{Table: pgx.Identifier{"public", "Hot Rows"}, Fence: "fence col",
			Key: []fencing.Column{{Name: "Id", Value: id}, {Name: "k2", Value: 1}}}
		if v != "" {
			u.Set = []fencing.Column{{Name: "v", Value: v}}
		}
		return u
	}
	get := func() (string, int64) {
		var v string
		var f int64
		if err := pool.QueryRow(ctx, `SELECT v, "fence col" FROM "Hot Rows" WHERE "Id" = 'x'`).Scan(&v, &f); err != nil {
			t.Fatal(err)
		}
		return v, f
	}
	// NULL fence counts as 0.
	if err := fencing.UpdateRow(ctx, pool, row("x", "five"), 5); err != nil {
		t.Fatal(err)
	}
	if err := fencing.UpdateRow(ctx, pool, row("x", "five again"), 5); err != nil {
		t.Fatalf("equal token: %v", err)
	}
	wantStale(t, fencing.UpdateRow(ctx, pool, row("x", "four"), 4), 4, 5)
	if v, f := get(); v != "five again" || f != 5 {
		t.Fatalf("row = (%q, %d), want (\"five again\", 5)", v, f)
	}
	// Claim only (no Set) raises the fence without writing data.
	if err := fencing.UpdateRow(ctx, pool, row("x", ""), 6); err != nil {
		t.Fatal(err)
	}
	if v, f := get(); v != "five again" || f != 6 {
		t.Fatalf("row = (%q, %d) after a claim, want (\"five again\", 6)", v, f)
	}
	err := fencing.UpdateRow(ctx, pool, row("missing", "v"), 100)
	if !errors.Is(err, fencing.ErrRowNotFound) || errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("missing row: want ErrRowNotFound only, got %v", err)
	}
	// Inside a transaction too.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	wantStale(t, fencing.UpdateRow(ctx, tx, row("x", "three"), 3), 3, 6)
	if err := fencing.UpdateRow(ctx, tx, row("x", "seven"), 7); err != nil {
		t.Fatalf("tx still usable after a stale update: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, f := get(); v != "seven" || f != 7 {
		t.Fatalf("row = (%q, %d), want (\"seven\", 7)", v, f)
	}
}

// testUpdateRowConcurrent: the row form's read-modify-write — claim, read,
// write, in one transaction — never loses an update either.
func testUpdateRowConcurrent(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)`)
	mustExec(t, pool, `INSERT INTO counters VALUES (1, 0, 0)`)
	row := func(set ...fencing.Column) fencing.RowUpdate {
		return fencing.RowUpdate{Table: pgx.Identifier{"counters"}, Fence: "fence",
			Key: []fencing.Column{{Name: "id", Value: 1}}, Set: set}
	}
	const workers, rounds = 8, 10
	var next, accepted, stale atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range rounds {
				token := distlock.Token(next.Add(1))
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if err := fencing.UpdateRow(ctx, tx, row(), token); err != nil {
						return err
					}
					var n int64
					if err := tx.QueryRow(ctx, `SELECT n FROM counters WHERE id = 1`).Scan(&n); err != nil {
						return err
					}
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					return fencing.UpdateRow(ctx, tx, row(fencing.Column{Name: "n", Value: n + 1}), token)
				})
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, fencing.ErrStaleToken):
					stale.Add(1)
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n int64
	if err := pool.QueryRow(ctx, `SELECT n FROM counters WHERE id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits, %d stale rejections, counter %d", accepted.Load(), stale.Load(), n)
	if accepted.Load() == 0 || n != accepted.Load() {
		t.Fatalf("counter = %d, commits = %d: want equal and positive", n, accepted.Load())
	}
}

func testInvalid(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	fn := func(pgx.Tx) error { return nil }
	row := fencing.RowUpdate{Table: pgx.Identifier{"data"}, Fence: "n",
		Key: []fencing.Column{{Name: "resource", Value: "x"}}}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	with := func(f func(*fencing.RowUpdate)) fencing.RowUpdate {
		u := row
		f(&u)
		return u
	}
	cases := map[string]func() error{
		"WithGuard nil ctx":        func() error { return fencing.WithGuard(nil, pool, "r", 1, fn) }, //nolint:staticcheck // the point of the test
		"WithGuard nil db":         func() error { return fencing.WithGuard(ctx, nil, "r", 1, fn) },
		"WithGuard typed nil pool": func() error { return fencing.WithGuard(ctx, (*pgxpool.Pool)(nil), "r", 1, fn) },
		"WithGuard typed nil conn": func() error { return fencing.WithGuard(ctx, (*pgx.Conn)(nil), "r", 1, fn) },
		"WithGuard empty resource": func() error { return fencing.WithGuard(ctx, pool, "", 1, fn) },
		"WithGuard control char":   func() error { return fencing.WithGuard(ctx, pool, "a\x00b", 1, fn) },
		"WithGuard long resource":  func() error { return fencing.WithGuard(ctx, pool, strings.Repeat("r", 600), 1, fn) },
		"WithGuard zero token":     func() error { return fencing.WithGuard(ctx, pool, "r", 0, fn) },
		"WithGuard negative token": func() error { return fencing.WithGuard(ctx, pool, "r", -1, fn) },
		"WithGuard nil fn":         func() error { return fencing.WithGuard(ctx, pool, "r", 1, nil) },
		"Guard nil tx":             func() error { return fencing.Guard(ctx, nil, "r", 1) },
		"Guard empty resource":     func() error { return fencing.Guard(ctx, tx, "", 1) },
		"Migrate nil db":           func() error { return fencing.Migrate(ctx, nil) },
		"UpdateRow nil db":         func() error { return fencing.UpdateRow(ctx, nil, row, 1) },
		"UpdateRow zero token":     func() error { return fencing.UpdateRow(ctx, pool, row, 0) },
		"UpdateRow no table": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Table = nil }), 1)
		},
		"UpdateRow empty table": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Table = pgx.Identifier{""} }), 1)
		},
		"UpdateRow no fence": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Fence = "" }), 1)
		},
		"UpdateRow no key": func() error { return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Key = nil }), 1) },
		"UpdateRow empty key name": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Key = []fencing.Column{{}} }), 1)
		},
		"UpdateRow sets fence": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Set = []fencing.Column{{Name: "n"}} }), 1)
		},
		"UpdateRow sets twice": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Set = []fencing.Column{{Name: "v"}, {Name: "v"}} }), 1)
		},
		"UpdateRow long identifier": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Fence = strings.Repeat("f", 64) }), 1)
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, fencing.ErrInvalid) || !errors.Is(err, distlock.ErrInvalid) {
				t.Fatalf("want fencing.ErrInvalid (and distlock.ErrInvalid), got %v", err)
			}
		})
	}
	for _, name := range [][]string{nil, {""}, {"a", "b", "c", "d"}, {"x\x00"}} {
		if _, err := fencing.NewTable(name...); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("NewTable(%q): want ErrInvalid, got %v", name, err)
		}
	}
}

func testCancelled(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := write(ctx, pool, "cancelled", 1, "never")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if got := value(t, pool, "cancelled"); got != "<none>" {
		t.Fatalf("data = %q after a cancelled write", got)
	}
	// A ctx that ends while the guard waits for the fence row lock.
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := fencing.Guard(context.Background(), tx, "cancelled", 5); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer wcancel()
	if err := write(wctx, pool, "cancelled", 6, "blocked"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("guard waiting on a held fence row: want DeadlineExceeded, got %v", err)
	}
}
