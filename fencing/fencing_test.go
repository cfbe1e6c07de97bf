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
	t.Run("EqualTokenSameHolder", func(t *testing.T) { testEqualSameHolder(t, pool) })
	t.Run("EqualTokenOtherHolder", func(t *testing.T) { testEqualOtherHolder(t, pool) })
	t.Run("RepeatedTokenLeases", func(t *testing.T) { testRepeatedTokenLeases(t, pool) })
	t.Run("GuardIsOneStatement", func(t *testing.T) { testGuardIsOneStatement(t, s.DSN()) })
	t.Run("UpgradeOldTable", func(t *testing.T) { testUpgradeOldTable(t, pool, s.DSN()) })
	t.Run("ConcurrentMigrate", func(t *testing.T) { testConcurrentMigrate(t, pool, s.DSN()) })
	t.Run("RollbackOnError", func(t *testing.T) { testRollbackOnError(t, pool) })
	t.Run("RollbackOnPanic", func(t *testing.T) { testRollbackOnPanic(t, pool) })
	t.Run("ConnAndTx", func(t *testing.T) { testConnAndTx(t, pool, s.DSN()) })
	t.Run("CustomTable", func(t *testing.T) { testCustomTable(t, pool) })
	t.Run("ConcurrentCounter", func(t *testing.T) { testConcurrentCounter(t, pool) })
	t.Run("MemoryLockPause", func(t *testing.T) { testMemoryLockPause(t, pool) })
	t.Run("Timeline", func(t *testing.T) { testTimeline(t, pool) })
	t.Run("UpdateRow", func(t *testing.T) { testUpdateRow(t, pool) })
	t.Run("UpdateRowEqualToken", func(t *testing.T) { testUpdateRowEqualToken(t, pool) })
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

// fence is the fence of a lease with token tok: one holder per token, as
// leases from a backend that never repeats tokens have.
func fence(tok distlock.Token) distlock.Fence {
	return distlock.Fence{Token: tok, Holder: "holder-" + tok.String()}
}

// write is a guarded transaction that sets resource's data row to value.
func write(ctx context.Context, db fencing.Beginner, resource string, f distlock.Fence, value string) error {
	return fencing.WithGuard(ctx, db, resource, f, func(tx pgx.Tx) error {
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
	return storedFence(t, db, resource).Token
}

// storedFence reads the fence row of resource; Holder is "" when NULL.
func storedFence(t testing.TB, db fencing.DB, resource string) distlock.Fence {
	t.Helper()
	var tok int64
	var holder *string
	err := db.QueryRow(context.Background(), `SELECT token, holder FROM distlock_fence WHERE resource = $1`, resource).Scan(&tok, &holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return distlock.Fence{}
	}
	if err != nil {
		t.Fatal(err)
	}
	f := distlock.Fence{Token: distlock.Token(tok)}
	if holder != nil {
		f.Holder = *holder
	}
	return f
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

// wantOtherHolder checks the refusal of an equal token from another holder:
// the error names both holders and says what happened.
func wantOtherHolder(t testing.TB, err error, refused, winner distlock.Fence) {
	t.Helper()
	wantStale(t, err, refused.Token, winner.Token)
	var se *fencing.StaleTokenError
	errors.As(err, &se)
	if se.Holder != refused.Holder || se.StoredHolder != winner.Holder {
		t.Fatalf("StaleTokenError{Holder: %q, StoredHolder: %q}, want {%q, %q}", se.Holder, se.StoredHolder, refused.Holder, winner.Holder)
	}
	if msg := err.Error(); !strings.Contains(msg, "same token from another holder") || !strings.Contains(msg, refused.Holder) {
		t.Fatalf("error %q does not say the same token came from another holder", msg)
	}
}

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

// testEqualOtherHolder is issue #13: a backend that hands a token out twice
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

// testRepeatedTokenLeases plays issue #13 with real leases: a lock service
// that lost its counter (two memory stores, as a server before and after a
// restart) gives a second holder the same token. The holder ids from
// Lease.Fence must tell them apart.
func testRepeatedTokenLeases(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "repeated-token"
	acquire := func() *distlock.Lease {
		l, err := memory.New(memory.WithStore(memory.NewStore()))
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

// oldDDL is the fence table as the previous version created it.
const oldDDL = `CREATE TABLE distlock_fence (resource text PRIMARY KEY, token bigint NOT NULL)`

// schemaPool is a pool whose unqualified names resolve in schema, so that
// Migrate's distlock_fence is that schema's.
func schemaPool(t *testing.T, dsn, schema string, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = conns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func hasHolderColumn(t *testing.T, db fencing.DB, schema string) bool {
	t.Helper()
	var has bool
	err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'distlock_fence' AND column_name = 'holder')`, schema).Scan(&has)
	if err != nil {
		t.Fatal(err)
	}
	return has
}

// testUpgradeOldTable: Migrate adds the holder column to a table the
// previous version made; its old rows, which name no holder, then accept
// only a larger token.
func testUpgradeOldTable(t *testing.T, pool *pgxpool.Pool, dsn string) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE SCHEMA legacy`)
	db := schemaPool(t, dsn, "legacy", 4)
	mustExec(t, db, oldDDL)
	mustExec(t, db, `INSERT INTO distlock_fence VALUES ('old', 5)`)
	if err := fencing.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if !hasHolderColumn(t, pool, "legacy") {
		t.Fatal("Migrate left the old table without a holder column")
	}
	if err := fencing.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate on the upgraded table: %v", err)
	}
	fn := func(pgx.Tx) error { return nil }
	// Nobody can prove they wrote token 5: no holder was recorded.
	err := fencing.WithGuard(ctx, db, "old", fence(5), fn)
	wantStale(t, err, 5, 5)
	if msg := err.Error(); !strings.Contains(msg, "same token from a holder it did not record") {
		t.Fatalf("error %q does not say the same token came from an unrecorded holder", msg)
	}
	if err := fencing.WithGuard(ctx, db, "old", fence(6), fn); err != nil {
		t.Fatal(err)
	}
	if err := fencing.WithGuard(ctx, db, "old", fence(6), fn); err != nil {
		t.Fatalf("same holder again after the upgrade: %v", err)
	}
	wantOtherHolder(t, fencing.WithGuard(ctx, db, "old", distlock.Fence{Token: 6, Holder: "intruder"}, fn),
		distlock.Fence{Token: 6, Holder: "intruder"}, fence(6))
	wantStale(t, fencing.WithGuard(ctx, db, "old", fence(4), fn), 4, 6)
	// New resources work as on a new table.
	if err := fencing.WithGuard(ctx, db, "new", fence(1), fn); err != nil {
		t.Fatal(err)
	}
}

// testConcurrentMigrate: processes starting together all run Migrate, on
// a database with no fence table or with the previous version's. Each race
// is forced: a transaction holds what every Migrate needs until all of them
// wait for it, then lets go.
func testConcurrentMigrate(t *testing.T, pool *pgxpool.Pool, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 6
	race := func(t *testing.T, schema, setup, block, queued string) {
		mustExec(t, pool, `CREATE SCHEMA `+schema)
		if setup != "" {
			mustExec(t, pool, setup)
		}
		db := schemaPool(t, dsn, schema, n)
		blocker, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer blocker.Rollback(ctx)
		mustExec(t, blocker, block)
		errs := make(chan error, n)
		for range n {
			go func() { errs <- fencing.Migrate(ctx, db) }()
		}
		for {
			var waiting int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND starts_with(query, $1)`, queued).Scan(&waiting)
			if err != nil {
				t.Fatal(err)
			}
			if waiting == n {
				break
			}
			select {
			case err := <-errs:
				t.Fatalf("a Migrate returned (%v) before all of them waited in %s", err, queued)
			case <-ctx.Done():
				t.Fatalf("%d of %d Migrate calls waited in %s", waiting, n, queued)
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err := blocker.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("concurrent Migrate: %v", err)
			}
		}
		if !hasHolderColumn(t, pool, schema) {
			t.Fatal("no holder column after concurrent Migrate")
		}
		if err := fencing.WithGuard(ctx, db, "r", fence(1), func(pgx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// Every CREATE TABLE IF NOT EXISTS collides with one not yet committed
	// (an old-version process creating its table), then every Migrate finds
	// the holder column missing and adds it.
	t.Run("NewTable", func(t *testing.T) {
		race(t, "race_create", "", `CREATE TABLE race_create.distlock_fence (resource text PRIMARY KEY, token bigint NOT NULL)`, "CREATE TABLE")
	})
	// Every Migrate finds the old table without the column, and all their
	// ALTERs queue on the table lock.
	t.Run("OldTable", func(t *testing.T) {
		race(t, "race_alter", `CREATE TABLE race_alter.distlock_fence (resource text PRIMARY KEY, token bigint NOT NULL)`,
			`LOCK TABLE race_alter.distlock_fence IN ACCESS EXCLUSIVE MODE`, "ALTER TABLE")
	})
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
				err := fencing.WithGuard(ctx, pool, r, fence(token), func(tx pgx.Tx) error {
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
	if err := write(ctx, pool, key, b.Fence(), "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// A wakes and writes with the token it still has.
	wantStale(t, write(ctx, pool, key, a.Fence(), "A"), a.Token(), b.Token())
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
	mustExec(t, pool, `CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL DEFAULT 0, fence_holder text)`)
	row := func(id int, set ...fencing.Column) fencing.RowUpdate {
		return fencing.RowUpdate{Table: pgx.Identifier{"accounts"}, Fence: "fence", Holder: "fence_holder",
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
	if err := fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: balance(1) + 10}), fence(a)); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	if err := fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: readByB + 50}), fence(b)); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if got := balance(1); got != 150 {
		t.Fatalf("late-check balance = %d; the doc's timeline says 150 (A's +10 lost)", got)
	}

	// Fence first: B claims right after acquiring, then reads; A is refused.
	mustExec(t, pool, `INSERT INTO accounts VALUES (2, 100, 32)`)
	if err := fencing.UpdateRow(ctx, pool, row(2), fence(b)); err != nil {
		t.Fatalf("B's claim: %v", err)
	}
	readByB = balance(2)
	wantStale(t, fencing.UpdateRow(ctx, pool, row(2, fencing.Column{Name: "balance", Value: balance(2) + 10}), fence(a)), a, b)
	if err := fencing.UpdateRow(ctx, pool, row(2, fencing.Column{Name: "balance", Value: readByB + 50}), fence(b)); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if got := balance(2); got != 150 {
		t.Fatalf("fence-first balance = %d, want 150", got)
	}
}

func testUpdateRow(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE "Hot Rows" ("Id" text, k2 int, v text, "fence col" bigint, "Holder col" text, PRIMARY KEY ("Id", k2))`)
	mustExec(t, pool, `INSERT INTO "Hot Rows" VALUES ('x', 1, 'init', NULL, NULL)`)
	row := func(id string, v string) fencing.RowUpdate {
		u := fencing.RowUpdate{Table: pgx.Identifier{"public", "Hot Rows"}, Fence: "fence col", Holder: "Holder col",
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
	if err := fencing.UpdateRow(ctx, pool, row("x", "five"), fence(5)); err != nil {
		t.Fatal(err)
	}
	if err := fencing.UpdateRow(ctx, pool, row("x", "five again"), fence(5)); err != nil {
		t.Fatalf("equal token: %v", err)
	}
	wantStale(t, fencing.UpdateRow(ctx, pool, row("x", "four"), fence(4)), 4, 5)
	if v, f := get(); v != "five again" || f != 5 {
		t.Fatalf("row = (%q, %d), want (\"five again\", 5)", v, f)
	}
	// Claim only (no Set) raises the fence without writing data.
	if err := fencing.UpdateRow(ctx, pool, row("x", ""), fence(6)); err != nil {
		t.Fatal(err)
	}
	if v, f := get(); v != "five again" || f != 6 {
		t.Fatalf("row = (%q, %d) after a claim, want (\"five again\", 6)", v, f)
	}
	err := fencing.UpdateRow(ctx, pool, row("missing", "v"), fence(100))
	if !errors.Is(err, fencing.ErrRowNotFound) || errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("missing row: want ErrRowNotFound only, got %v", err)
	}
	// Inside a transaction too.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	wantStale(t, fencing.UpdateRow(ctx, tx, row("x", "three"), fence(3)), 3, 6)
	if err := fencing.UpdateRow(ctx, tx, row("x", "seven"), fence(7)); err != nil {
		t.Fatalf("tx still usable after a stale update: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, f := get(); v != "seven" || f != 7 {
		t.Fatalf("row = (%q, %d), want (\"seven\", 7)", v, f)
	}
}

// testUpdateRowEqualToken: the row form's holder column does for the row
// what the fence table's does: the holder that wrote a token may write
// again with it (claim, then write), another holder may not.
func testUpdateRowEqualToken(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE wallets (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL DEFAULT 0, fence_holder text)`)
	mustExec(t, pool, `INSERT INTO wallets (id, balance) VALUES (1, 100)`)
	mustExec(t, pool, `INSERT INTO wallets (id, balance, fence) VALUES (2, 100, 5)`) // fenced before holders were recorded
	row := func(id int, set ...fencing.Column) fencing.RowUpdate {
		return fencing.RowUpdate{Table: pgx.Identifier{"wallets"}, Fence: "fence", Holder: "fence_holder",
			Key: []fencing.Column{{Name: "id", Value: id}}, Set: set}
	}
	get := func(id int) (balance int64, f distlock.Fence) {
		var tok int64
		var holder *string
		if err := pool.QueryRow(ctx, `SELECT balance, fence, fence_holder FROM wallets WHERE id = $1`, id).Scan(&balance, &tok, &holder); err != nil {
			t.Fatal(err)
		}
		f.Token = distlock.Token(tok)
		if holder != nil {
			f.Holder = *holder
		}
		return balance, f
	}
	a := distlock.Fence{Token: 7, Holder: "a"}
	b := distlock.Fence{Token: 7, Holder: "b"}
	// a claims, then writes with the same fence.
	if err := fencing.UpdateRow(ctx, pool, row(1), a); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if err := fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: 110}), a); err != nil {
		t.Fatalf("the claiming holder's write: %v", err)
	}
	// b has the same token: refused, in autocommit and in a transaction.
	wantOtherHolder(t, fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: 150}), b), b, a)
	wantOtherHolder(t, fencing.UpdateRow(ctx, pool, row(1), b), b, a)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return fencing.UpdateRow(ctx, tx, row(1, fencing.Column{Name: "balance", Value: 150}), b)
	})
	wantOtherHolder(t, err, b, a)
	if bal, f := get(1); bal != 110 || f != a {
		t.Fatalf("row = (%d, %+v), want (110, %+v)", bal, f, a)
	}
	// A larger token takes the row from anyone.
	c := distlock.Fence{Token: 8, Holder: "a"}
	if err := fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: 120}), c); err != nil {
		t.Fatal(err)
	}
	if bal, f := get(1); bal != 120 || f != c {
		t.Fatalf("row = (%d, %+v), want (120, %+v)", bal, f, c)
	}
	// A row fenced without a holder accepts only a larger token.
	wantStale(t, fencing.UpdateRow(ctx, pool, row(2, fencing.Column{Name: "balance", Value: 0}), fence(5)), 5, 5)
	if err := fencing.UpdateRow(ctx, pool, row(2, fencing.Column{Name: "balance", Value: 160}), fence(6)); err != nil {
		t.Fatal(err)
	}
	if bal, f := get(2); bal != 160 || f != fence(6) {
		t.Fatalf("row = (%d, %+v), want (160, %+v)", bal, f, fence(6))
	}
}

// testUpdateRowConcurrent: the row form's read-modify-write — claim, read,
// write, in one transaction — never loses an update either.
func testUpdateRowConcurrent(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL, fence bigint NOT NULL DEFAULT 0, holder text)`)
	mustExec(t, pool, `INSERT INTO counters VALUES (1, 0, 0)`)
	row := func(set ...fencing.Column) fencing.RowUpdate {
		return fencing.RowUpdate{Table: pgx.Identifier{"counters"}, Fence: "fence", Holder: "holder",
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
					if err := fencing.UpdateRow(ctx, tx, row(), fence(token)); err != nil {
						return err
					}
					var n int64
					if err := tx.QueryRow(ctx, `SELECT n FROM counters WHERE id = 1`).Scan(&n); err != nil {
						return err
					}
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					return fencing.UpdateRow(ctx, tx, row(fencing.Column{Name: "n", Value: n + 1}), fence(token))
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
	// Bounded: a call that wrongly reaches the database may wait on the
	// fence row that tx below holds; it must fail, not hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fn := func(pgx.Tx) error { return nil }
	row := fencing.RowUpdate{Table: pgx.Identifier{"data"}, Fence: "n", Holder: "value",
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
		"WithGuard nil ctx":        func() error { return fencing.WithGuard(nil, pool, "r", fence(1), fn) }, //nolint:staticcheck // the point of the test
		"WithGuard nil db":         func() error { return fencing.WithGuard(ctx, nil, "r", fence(1), fn) },
		"WithGuard typed nil pool": func() error { return fencing.WithGuard(ctx, (*pgxpool.Pool)(nil), "r", fence(1), fn) },
		"WithGuard typed nil conn": func() error { return fencing.WithGuard(ctx, (*pgx.Conn)(nil), "r", fence(1), fn) },
		"WithGuard empty resource": func() error { return fencing.WithGuard(ctx, pool, "", fence(1), fn) },
		"WithGuard control char":   func() error { return fencing.WithGuard(ctx, pool, "a\x00b", fence(1), fn) },
		"WithGuard long resource":  func() error { return fencing.WithGuard(ctx, pool, strings.Repeat("r", 600), fence(1), fn) },
		"WithGuard zero token":     func() error { return fencing.WithGuard(ctx, pool, "r", fence(0), fn) },
		"WithGuard negative token": func() error { return fencing.WithGuard(ctx, pool, "r", fence(-1), fn) },
		"WithGuard nil fn":         func() error { return fencing.WithGuard(ctx, pool, "r", fence(1), nil) },
		"Guard nil tx":             func() error { return fencing.Guard(ctx, nil, "r", fence(1)) },
		"Guard empty resource":     func() error { return fencing.Guard(ctx, tx, "", fence(1)) },
		"WithGuard empty holder":   func() error { return fencing.WithGuard(ctx, pool, "r", distlock.Fence{Token: 1}, fn) },
		"Guard empty holder":       func() error { return fencing.Guard(ctx, tx, "r", distlock.Fence{Token: 1}) },
		"Guard NUL in holder":      func() error { return fencing.Guard(ctx, tx, "r", distlock.Fence{Token: 1, Holder: "a\x00b"}) },
		"Guard holder not UTF-8":   func() error { return fencing.Guard(ctx, tx, "r", distlock.Fence{Token: 1, Holder: "\xff"}) },
		"Guard long holder": func() error {
			return fencing.Guard(ctx, tx, "r", distlock.Fence{Token: 1, Holder: strings.Repeat("h", 256)})
		},
		"UpdateRow empty holder": func() error { return fencing.UpdateRow(ctx, pool, row, distlock.Fence{Token: 1}) },
		"UpdateRow no holder column": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Holder = "" }), fence(1))
		},
		"UpdateRow holder is fence": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Holder = u.Fence }), fence(1))
		},
		"UpdateRow sets holder": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Set = []fencing.Column{{Name: "value"}} }), fence(1))
		},
		"Migrate nil db":       func() error { return fencing.Migrate(ctx, nil) },
		"UpdateRow nil db":     func() error { return fencing.UpdateRow(ctx, nil, row, fence(1)) },
		"UpdateRow zero token": func() error { return fencing.UpdateRow(ctx, pool, row, fence(0)) },
		"UpdateRow no table": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Table = nil }), fence(1))
		},
		"UpdateRow empty table": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Table = pgx.Identifier{""} }), fence(1))
		},
		"UpdateRow no fence": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Fence = "" }), fence(1))
		},
		"UpdateRow no key": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Key = nil }), fence(1))
		},
		"UpdateRow empty key name": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Key = []fencing.Column{{}} }), fence(1))
		},
		"UpdateRow sets fence": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Set = []fencing.Column{{Name: "n"}} }), fence(1))
		},
		"UpdateRow sets twice": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Set = []fencing.Column{{Name: "v"}, {Name: "v"}} }), fence(1))
		},
		"UpdateRow long identifier": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Fence = strings.Repeat("f", 64) }), fence(1))
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
	err := write(ctx, pool, "cancelled", fence(1), "never")
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
	if err := fencing.Guard(context.Background(), tx, "cancelled", fence(5)); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer wcancel()
	if err := write(wctx, pool, "cancelled", fence(6), "blocked"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("guard waiting on a held fence row: want DeadlineExceeded, got %v", err)
	}
}
