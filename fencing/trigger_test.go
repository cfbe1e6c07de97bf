package fencing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
)

// testMigrateInstallsTriggers: Migrate, on a fence table of every shape an
// earlier version left, keeps its rows and installs the triggers:
// afterwards no update lowers a fence, the guard still raises it, and
// Migrate in a read-only session passes (it only reads the catalog, which
// counts the triggers). A table whose triggers were switched off, or run a
// function that lets anything through or takes the caller's search_path,
// is not current either.
func testMigrateInstallsTriggers(t *testing.T, admin *pgxpool.Pool, dsn string) {
	ctx := context.Background()
	shapes := []struct{ name, setup string }{
		{"token", `CREATE TABLE distlock_fence (resource text PRIMARY KEY, token bigint NOT NULL)`},
		{"holder", `CREATE TABLE distlock_fence (resource text PRIMARY KEY, token bigint NOT NULL, holder text)`},
		{"epoch", `CREATE TABLE distlock_fence (resource text PRIMARY KEY, epoch bigint NOT NULL DEFAULT 0,
			token bigint NOT NULL, holder text)`},
		{"disabled", `SELECT 1`},
		{"tampered", `SELECT 1`},
		{"unpinned", `SELECT 1`},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			schema := "before_" + sh.name
			mustExec(t, admin, `CREATE SCHEMA `+schema)
			db := schemaPool(t, dsn, schema, 2)
			mustExec(t, db, sh.setup)
			switch sh.name {
			case "disabled":
				mustMigrate(t, db)
				mustExec(t, db, `ALTER TABLE distlock_fence DISABLE TRIGGER distlock_fence_no_lowering`)
			case "tampered":
				mustMigrate(t, db)
				mustExec(t, db, `CREATE OR REPLACE FUNCTION distlock_fence_no_lowering() RETURNS trigger
					LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$`)
			case "unpinned":
				mustMigrate(t, db)
				mustExec(t, db, `ALTER FUNCTION distlock_fence_no_lowering() RESET search_path`)
			}
			mustExec(t, db, `INSERT INTO distlock_fence (resource, token) VALUES ('kept', 10)`)
			ro := schemaPool(t, dsn+"&default_transaction_read_only=on", schema, 1)
			if err := fencing.Migrate(ctx, ro); err == nil {
				t.Fatal("Migrate in a read-only session on a table without working triggers passed: it took the table for current")
			}
			mustMigrate(t, db)
			if err := fencing.Migrate(ctx, ro); err != nil {
				t.Fatalf("Migrate in a read-only session after the upgrade: %v", err)
			}
			_, err := db.Exec(ctx, `UPDATE distlock_fence SET token = 9 WHERE resource = 'kept'`)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
				t.Fatalf("lowering a fence after Migrate: %v, want a check_violation", err)
			}
			noop := func(pgx.Tx) error { return nil }
			wantStale(t, fencing.WithGuard(ctx, db, "kept", fence(9), noop), 9, 10)
			for _, f := range []distlock.Fence{fence(11), fence(11), {Epoch: 1, Token: 1, Holder: "next"}} {
				if err := fencing.WithGuard(ctx, db, "kept", f, noop); err != nil {
					t.Fatalf("guard %+v after Migrate: %v", f, err)
				}
			}
		})
	}
}

func mustMigrate(t *testing.T, db fencing.DB) {
	t.Helper()
	if err := fencing.Migrate(context.Background(), db); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}
