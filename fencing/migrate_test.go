package fencing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
)

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
				WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, queued).Scan(&waiting)
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
