package fencing_test

// The least-privilege recipe of the package doc, against a server that
// takes clients only over TLS with SCRAM passwords (hostssl).

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
)

const tenantPassword = "tenant pw: s3cret/@?"

// TestLeastPrivilegeOverTLSWithSCRAM starts one secured server for all
// subtests, with the roles of the package doc's recipe: fence_owner (the
// Migrator) may create in schema public and owns the table Migrate makes;
// app (the Runtime role) has USAGE on the schema and SELECT, INSERT,
// UPDATE on the fence table, nothing else.
func TestLeastPrivilegeOverTLSWithSCRAM(t *testing.T) {
	s := testserver.PostgresSecured(t)
	ctx := context.Background()
	admin := rolePool(t, s.DSN(), nil)
	owner := rolePool(t, s.Migrator.DSN, nil)
	if err := fencing.Migrate(ctx, owner); err != nil {
		t.Fatalf("Migrate by the migrating role: %v", err)
	}
	mustExec(t, owner, `CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, n bigint NOT NULL DEFAULT 0)`)
	s.GrantRuntime(t, "distlock_fence", "data")
	app := rolePool(t, s.Runtime.DSN, nil)
	passwords := []string{s.Password, s.Migrator.Password, s.Runtime.Password, tenantPassword}

	t.Run("RuntimeRoleGuardsAndMigrates", func(t *testing.T) { testRuntimeRoleGuards(t, admin, app) })
	t.Run("RuntimeRoleMigrateOnOutdatedTableIsAccessDenied", func(t *testing.T) {
		testRuntimeMigrateOutdated(t, owner, app, passwords)
	})
	t.Run("MissingPrivilegeIsAccessDenied", func(t *testing.T) { testMissingPrivilege(t, owner, app, passwords) })
	t.Run("WrongPasswordIsAccessDenied", func(t *testing.T) {
		testRefusedConnection(t, s.RoleDSN("app", "wrong "+s.Runtime.Password), "28P01", passwords)
	})
	t.Run("PlainTCPIsAccessDenied", func(t *testing.T) {
		testRefusedConnection(t, withParam(t, s.Runtime.DSN, "sslmode", "disable"), "28000", passwords)
	})
	t.Run("ServerCertificateOfAnotherCAIsAccessDenied", func(t *testing.T) {
		testRefusedConnection(t, withParam(t, s.Runtime.DSN, "sslrootcert", testserver.NewCA(t).File), "", passwords)
	})
	t.Run("CoTenantCannotLowerAFence", func(t *testing.T) { testCoTenantCannotLower(t, s, admin, owner, app) })
}

func withParam(t *testing.T, dsn, name, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// The runtime role, over TLS with SCRAM, can do all Guard, WithGuard and
// Migrate (on a current table) need, and no more than the recipe grants.
func testRuntimeRoleGuards(t *testing.T, admin, app *pgxpool.Pool) {
	ctx := context.Background()
	var ssl, canCreate, canDelete bool
	err := admin.QueryRow(ctx, `SELECT has_schema_privilege('app', 'public', 'CREATE'),
		has_table_privilege('app', 'distlock_fence', 'DELETE')`).Scan(&canCreate, &canDelete)
	if err != nil || canCreate || canDelete {
		t.Fatalf("app may create in public %v, delete fences %v (%v): the recipe grants neither", canCreate, canDelete, err)
	}
	if err := app.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil || !ssl {
		t.Fatalf("app's connection is not TLS (%v, %v)", ssl, err)
	}
	if err := write(ctx, app, "rt", fence(5), "five"); err != nil {
		t.Fatalf("a guarded write by the runtime role: %v", err)
	}
	if err := write(ctx, app, "rt", fence(5), "five again"); err != nil {
		t.Fatalf("the same holder writing again: %v", err)
	}
	wantStale(t, write(ctx, app, "rt", fence(4), "four"), 4, 5)
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := fencing.Guard(ctx, tx, "rt", fence(6)); err != nil {
		t.Fatalf("Guard by the runtime role: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fencing.Migrate(ctx, app); err != nil {
		t.Fatalf("Migrate by the runtime role on a current table: %v", err)
	}
}

// A table that is not current (its triggers gone) needs its owner: the
// runtime role's Migrate says so with an error that matches
// ErrAccessDenied and carries the SQLSTATE; the owner's brings it back.
func testRuntimeMigrateOutdated(t *testing.T, owner, app *pgxpool.Pool, passwords []string) {
	ctx := context.Background()
	mustExec(t, owner, `DROP TRIGGER distlock_fence_no_lowering ON distlock_fence`)
	err := fencing.Migrate(ctx, app)
	wantAccessDenied(t, err, "42501", passwords)
	t.Logf("message: %v", err)
	if err := fencing.Migrate(ctx, owner); err != nil {
		t.Fatalf("Migrate by the owner: %v", err)
	}
	if err := fencing.Migrate(ctx, app); err != nil {
		t.Fatalf("Migrate by the runtime role after the owner's: %v", err)
	}
}

// A guard on a fence table the role has no grant on is refused with an
// error that matches ErrAccessDenied.
func testMissingPrivilege(t *testing.T, owner, app *pgxpool.Pool, passwords []string) {
	ctx := context.Background()
	other, err := fencing.NewTable("fence_without_grant")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	err = other.WithGuard(ctx, app, "r", fence(1), func(pgx.Tx) error { return nil })
	wantAccessDenied(t, err, "42501", passwords)
}

// A connection the server (or the client) refuses fails WithGuard and
// Migrate with an error that matches ErrAccessDenied, keeps the SQLSTATE
// (code; "" for a refused server certificate) and names no password.
func testRefusedConnection(t *testing.T, dsn, code string, passwords []string) {
	ctx := context.Background()
	db := rolePool(t, dsn, nil)
	err := fencing.WithGuard(ctx, db, "r", fence(1), func(pgx.Tx) error { return nil })
	wantAccessDenied(t, err, code, passwords)
	t.Logf("message: %v", err)
	wantAccessDenied(t, fencing.Migrate(ctx, db), code, passwords)
}

func wantAccessDenied(t *testing.T, err error, code string, passwords []string) {
	t.Helper()
	if !errors.Is(err, distlock.ErrAccessDenied) {
		t.Fatalf("want an error matching distlock.ErrAccessDenied, got %v", err)
	}
	if errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("an access error also matches ErrUnavailable or ErrStaleToken: %v", err)
	}
	var pgErr *pgconn.PgError
	if code != "" && (!errors.As(err, &pgErr) || pgErr.Code != code) {
		t.Fatalf("want SQLSTATE %s in the chain, got %v", code, err)
	}
	for _, pw := range passwords {
		if names(err.Error(), pw) {
			t.Fatalf("the error names a password: %v", err)
		}
	}
}

// A co-tenant that may UPDATE, DELETE and TRUNCATE the fence table (all a
// shared fence table's other users need, and more), and create operators
// in a schema of its own, cannot lower a fence: every way down is refused,
// so the stale holder stays refused; the guard's
// raises and a holder's rewrite still pass; the owner can lower a fence by
// disabling the trigger, as the package doc says.
func testCoTenantCannotLower(t *testing.T, s *testserver.SecuredPostgres, admin, owner, app *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, admin, `CREATE ROLE tenant LOGIN PASSWORD '`+tenantPassword+`'`)
	mustExec(t, admin, `GRANT USAGE ON SCHEMA public TO tenant`)
	mustExec(t, owner, `GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON distlock_fence TO tenant`)
	tenant := rolePool(t, s.RoleDSN("tenant", tenantPassword), nil)
	// A schema of its own, with a <> on text that says no to anything:
	// first on its search_path, it would let the trigger take a moved fence
	// for the same resource.
	mustExec(t, admin, `CREATE SCHEMA tenant_own AUTHORIZATION tenant`)
	mustExec(t, tenant, `CREATE FUNCTION tenant_own.no(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT false'`)
	mustExec(t, tenant, `CREATE OPERATOR tenant_own.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = tenant_own.no)`)
	current := distlock.Fence{Epoch: 1, Token: 10, Holder: "current"}
	if err := write(ctx, app, "acct", current, "current's"); err != nil {
		t.Fatal(err)
	}
	// Each way down, with the stale fence it would let through.
	behind := distlock.Fence{Epoch: 1, Token: 9, Holder: "stale"}
	for _, down := range []struct {
		name, sql string
		stale     distlock.Fence
	}{
		{"smaller token", `UPDATE distlock_fence SET token = 9, holder = 'stale' WHERE resource = 'acct'`, behind},
		{"smaller epoch, larger token", `UPDATE distlock_fence SET epoch = 0, token = 99 WHERE resource = 'acct'`,
			distlock.Fence{Epoch: 0, Token: 100, Holder: "old deployment"}},
		{"same pair, another holder", `UPDATE distlock_fence SET holder = 'twin' WHERE resource = 'acct'`,
			distlock.Fence{Epoch: 1, Token: 10, Holder: "twin"}},
		{"moved to another resource", `UPDATE distlock_fence SET resource = 'elsewhere' WHERE resource = 'acct'`, behind},
		{"deleted", `DELETE FROM distlock_fence WHERE resource = 'acct'`, behind},
		{"truncated", `TRUNCATE distlock_fence`, behind},
		{"through an operator of its own", `SELECT pg_catalog.set_config('search_path', 'tenant_own, pg_catalog', true);
			UPDATE public.distlock_fence SET resource = 'moved' WHERE resource = 'acct'`, behind},
	} {
		_, err := tenant.Exec(ctx, down.sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("%s by a co-tenant (%s): %v, want a check_violation", down.name, down.sql, err)
		}
		if got := storedFence(t, admin, "acct"); got.Token != current.Token || got.Holder != current.Holder {
			t.Errorf("after the co-tenant's %s, the fence is %+v", down.name, got)
		}
		if err := write(ctx, app, "acct", down.stale, "stale's"); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("the stale holder %+v after a co-tenant's %s: %v", down.stale, down.name, err)
		}
	}
	_, err := tenant.Exec(ctx, `UPDATE distlock_fence SET token = 9 WHERE resource = 'acct'`)
	t.Logf("message: %v", err)
	// Only the owner may switch the trigger off.
	_, err = tenant.Exec(ctx, `ALTER TABLE distlock_fence DISABLE TRIGGER distlock_fence_no_lowering`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("a co-tenant disabling the trigger: %v, want insufficient_privilege", err)
	}

	// What the guard writes still passes: the holder again, a larger token,
	// a larger epoch.
	for _, f := range []distlock.Fence{current, {Epoch: 1, Token: 11, Holder: "next"}, {Epoch: 2, Token: 1, Holder: "moved"}} {
		if err := write(ctx, app, "acct", f, "v"); err != nil {
			t.Fatalf("guarded write with %+v: %v", f, err)
		}
	}

	ownerLowers(t, owner, admin, app)
}

// ownerLowers lowers the fence of acct the way the package doc tells the
// table's owner to, in one transaction, and checks the triggers are back.
func ownerLowers(t *testing.T, owner, admin, app *pgxpool.Pool) {
	ctx := context.Background()
	tx, err := owner.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	mustExec(t, tx, `ALTER TABLE distlock_fence DISABLE TRIGGER distlock_fence_no_lowering`)
	mustExec(t, tx, `UPDATE distlock_fence SET epoch = 0, token = 1 WHERE resource = 'acct'`)
	mustExec(t, tx, `ALTER TABLE distlock_fence ENABLE ALWAYS TRIGGER distlock_fence_no_lowering`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := storedFence(t, admin, "acct"); got.Token != 1 {
		t.Fatalf("the owner's lowering left token %d", got.Token)
	}
	if err := fencing.Migrate(ctx, app); err != nil {
		t.Fatalf("the triggers are back on, so Migrate by the runtime role has nothing to do: %v", err)
	}
}

// names reports whether msg holds pw, escaped or not, or its first half
// (the secured server's passwords start with random hex).
func names(msg, pw string) bool {
	for _, s := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), pw[:len(pw)/2]} {
		if len(s) >= 8 && strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
