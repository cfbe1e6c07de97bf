package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
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
	t.Run("MigrateInstallsTriggers", func(t *testing.T) { testMigrateInstallsTriggers(t, pool, s.DSN()) })
	t.Run("RollbackOnError", func(t *testing.T) { testRollbackOnError(t, pool) })
	t.Run("RollbackOnPanic", func(t *testing.T) { testRollbackOnPanic(t, pool) })
	t.Run("ConnAndTx", func(t *testing.T) { testConnAndTx(t, pool, s.DSN()) })
	t.Run("CustomTable", func(t *testing.T) { testCustomTable(t, pool) })
	t.Run("ConcurrentCounter", func(t *testing.T) { testConcurrentCounter(t, pool) })
	t.Run("MemoryLockPause", func(t *testing.T) { testMemoryLockPause(t, pool) })
	t.Run("Timeline", func(t *testing.T) { testTimeline(t, pool) })
	t.Run("EpochFirst", func(t *testing.T) { testEpochFirst(t, pool) })
	t.Run("EpochRow", func(t *testing.T) { testEpochRow(t, pool) })
	t.Run("UpgradeAddsEpoch", func(t *testing.T) { testUpgradeAddsEpoch(t, pool, s.DSN()) })
	t.Run("MemoryRestart", func(t *testing.T) { testMemoryRestart(t, pool, s.DSN()) })
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
