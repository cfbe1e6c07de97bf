package fencing_test

// Ways around the fence triggers, each tried against a secured server with
// a co-tenant role: an operator
// that spoofs Migrate's catalog look, a replica session, a trigger of the
// co-tenant's own, Migrate run by a member of the owner role or a
// superuser, two owners in one schema, and an advisory lock held to stall
// the upgrade.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
)

const bypassTenantPW = "tenant-bypass-pw-0123456789"

type bypassEnv struct {
	s                         *testserver.SecuredPostgres
	admin, owner, app, tenant *pgxpool.Pool
}

// bypassSetup starts a secured server and a co-tenant role "tenant" with
// USAGE on public and a schema of its own. The data table of write()
// exists (owned by fence_owner, granted to app).
func bypassSetup(t *testing.T) *bypassEnv {
	s := testserver.PostgresSecured(t)
	e := &bypassEnv{s: s}
	e.admin = rolePool(t, s.DSN(), nil)
	e.owner = rolePool(t, s.Migrator.DSN, nil)
	mustExec(t, e.owner, `CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, n bigint NOT NULL DEFAULT 0)`)
	mustExec(t, e.owner, `GRANT SELECT, INSERT, UPDATE ON data TO app`)
	e.app = rolePool(t, s.Runtime.DSN, nil)
	mustExec(t, e.admin, `CREATE ROLE tenant LOGIN PASSWORD '`+bypassTenantPW+`'`)
	mustExec(t, e.admin, `GRANT USAGE ON SCHEMA public TO tenant`)
	mustExec(t, e.admin, `CREATE SCHEMA tenant_own AUTHORIZATION tenant`)
	e.tenant = rolePool(t, s.RoleDSN("tenant", bypassTenantPW), nil)
	return e
}

// previousRelease is the fence table of the release before the triggers.
const previousRelease = `CREATE TABLE distlock_fence (resource text PRIMARY KEY, epoch bigint NOT NULL DEFAULT 0, token bigint NOT NULL, holder text)`

func distlockTriggers(t *testing.T, db fencing.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname LIKE 'distlock%'`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantStaleAfterCurrent writes token 10 as "current", then token 9 as
// "stale", which must be refused.
func wantStaleAfterCurrent(t *testing.T, e *bypassEnv) {
	t.Helper()
	ctx := context.Background()
	if err := write(ctx, e.app, "acct", distlock.Fence{Epoch: 1, Token: 10, Holder: "current"}, "current's"); err != nil {
		t.Fatal(err)
	}
	stale := distlock.Fence{Epoch: 1, Token: 9, Holder: "stale"}
	if err := write(ctx, e.app, "acct", stale, "stale's"); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("stale holder %+v after token 10: err=%v, data now %q", stale, err, value(t, e.admin, "acct"))
	}
}

// Migrate's look at the catalog compares with pg_catalog's operators only:
// an operator = (oid, regclass) that a co-tenant with CREATE on public
// adds, which would match more exactly than pg_catalog's, cannot point it
// at a decoy table with intact triggers (CVE-2018-1058's pattern). The
// owner's Migrate then upgrades the real table.
func TestMigrateLookIgnoresCoTenantOperators(t *testing.T) {
	ctx := context.Background()
	e := bypassSetup(t)
	mustExec(t, e.admin, `GRANT CREATE ON SCHEMA public TO tenant`)
	mustExec(t, e.owner, previousRelease)
	mustExec(t, e.owner, `GRANT SELECT, INSERT, UPDATE ON distlock_fence TO app, tenant`)
	decoy, err := fencing.NewTable("tenant_own", "decoy")
	if err != nil {
		t.Fatal(err)
	}
	if err := decoy.Create(ctx, e.tenant); err != nil {
		t.Fatal(err)
	}
	mustExec(t, e.tenant, `GRANT USAGE ON SCHEMA tenant_own TO PUBLIC`)
	mustExec(t, e.tenant, `CREATE FUNCTION public.oid_eq_regclass(o oid, r regclass) RETURNS boolean LANGUAGE sql STABLE
		SET search_path = pg_catalog AS $$ SELECT CASE WHEN r = 'public.distlock_fence'::regclass THEN o = 'tenant_own.decoy'::regclass ELSE o = r END $$`)
	mustExec(t, e.tenant, `CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.oid_eq_regclass)`)
	mustExec(t, e.tenant, `CREATE FUNCTION public.text_arr_eq(text[], text[]) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'`)
	mustExec(t, e.tenant, `CREATE OPERATOR public.= (LEFTARG = text[], RIGHTARG = text[], FUNCTION = public.text_arr_eq)`)

	if err := fencing.Migrate(ctx, e.owner); err != nil {
		t.Fatalf("owner's Migrate: %v", err)
	}
	if n := distlockTriggers(t, e.admin, "public.distlock_fence"); n != 2 {
		t.Fatalf("owner's Migrate left %d distlock triggers on the real table, want 2", n)
	}
	if err := write(ctx, e.app, "acct", distlock.Fence{Epoch: 1, Token: 10, Holder: "current"}, "current's"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.tenant.Exec(ctx, `UPDATE distlock_fence SET token = 1 WHERE resource = 'acct'`); err == nil {
		t.Fatal("the co-tenant lowered the fence")
	}
	wantStale(t, write(ctx, e.app, "acct", distlock.Fence{Epoch: 1, Token: 9, Holder: "stale"}, "x"), 9, 10)
}

// The triggers fire in a session with session_replication_role = replica
// (ENABLE ALWAYS), which a role granted SET on that parameter may start
// without owning the table; a trigger switched back to ENABLE (origin) is
// not current.
func TestReplicaSessionCannotSkipTheTriggers(t *testing.T) {
	ctx := context.Background()
	e := bypassSetup(t)
	if err := fencing.Migrate(ctx, e.owner); err != nil {
		t.Fatal(err)
	}
	e.s.GrantRuntime(t, "distlock_fence")
	mustExec(t, e.owner, `GRANT SELECT, INSERT, UPDATE ON distlock_fence TO tenant`)
	mustExec(t, e.admin, `GRANT SET ON PARAMETER session_replication_role TO tenant`)
	if err := write(ctx, e.app, "acct", distlock.Fence{Epoch: 1, Token: 10, Holder: "current"}, "current's"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.tenant.Exec(ctx, `SET session_replication_role = replica; UPDATE distlock_fence SET token = 1 WHERE resource = 'acct'; RESET session_replication_role`); err == nil {
		t.Fatal("the co-tenant lowered the fence in a replica session")
	}
	wantStale(t, write(ctx, e.app, "acct", distlock.Fence{Epoch: 1, Token: 9, Holder: "stale"}, "x"), 9, 10)

	mustExec(t, e.owner, `ALTER TABLE distlock_fence ENABLE TRIGGER distlock_fence_no_lowering`)
	if err := fencing.Migrate(ctx, e.app); err == nil {
		t.Fatal("runtime Migrate took a table whose trigger fires only in origin sessions for current")
	}
	if err := fencing.Migrate(ctx, e.owner); err != nil {
		t.Fatalf("owner's Migrate: %v", err)
	}
	if err := fencing.Migrate(ctx, e.app); err != nil {
		t.Fatalf("runtime Migrate after the owner's: %v", err)
	}
}

// A co-tenant with only the TRIGGER privilege (part of GRANT ALL) adds a
// BEFORE UPDATE trigger that sorts after distlock's and lowers NEW. The
// row check runs after every BEFORE trigger, so the lowered row is
// refused; and Migrate, for every role, reports the foreign trigger by
// name instead of taking the table for current.
func TestForeignTriggerCannotLowerAFence(t *testing.T) {
	ctx := context.Background()
	e := bypassSetup(t)
	if err := fencing.Migrate(ctx, e.owner); err != nil {
		t.Fatal(err)
	}
	e.s.GrantRuntime(t, "distlock_fence")
	mustExec(t, e.owner, `GRANT TRIGGER ON distlock_fence TO tenant`) // no SELECT/INSERT/UPDATE/DELETE at all
	if err := write(ctx, e.app, "acct", distlock.Fence{Epoch: 1, Token: 10, Holder: "current"}, "current's"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, e.tenant, `CREATE FUNCTION tenant_own.lower() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF TG_OP = 'UPDATE' THEN NEW.token := 1; END IF; RETURN NEW; END $$`)
	mustExec(t, e.tenant, `CREATE TRIGGER zz_lower BEFORE INSERT OR UPDATE ON public.distlock_fence
		FOR EACH ROW EXECUTE FUNCTION tenant_own.lower()`)
	for name, db := range map[string]*pgxpool.Pool{"runtime": e.app, "owner": e.owner} {
		err := fencing.Migrate(ctx, db)
		if !errors.Is(err, fencing.ErrForeignTrigger) || !strings.Contains(err.Error(), "zz_lower") {
			t.Fatalf("%s Migrate with the co-tenant's trigger on the table: %v, want ErrForeignTrigger naming zz_lower", name, err)
		}
	}
	if err := write(ctx, e.app, "acct", distlock.Fence{Epoch: 1, Token: 11, Holder: "current"}, "current's"); err == nil {
		t.Fatal("a guarded write whose row a foreign trigger lowered to token 1 was accepted")
	}
	if got := storedFence(t, e.admin, "acct"); got.Token != 10 {
		t.Fatalf("stored fence %+v, want token 10", got)
	}
	wantStale(t, write(ctx, e.app, "acct", distlock.Fence{Epoch: 1, Token: 9, Holder: "stale"}, "x"), 9, 10)

	// On INSERT no trigger of distlock's runs: the guard sees the stored
	// row (RETURNING) differ from the one it wrote.
	mustExec(t, e.tenant, `CREATE OR REPLACE FUNCTION tenant_own.lower() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.token := 1; RETURN NEW; END $$`)
	err := write(ctx, e.app, "fresh", distlock.Fence{Epoch: 1, Token: 10, Holder: "current"}, "current's")
	if !errors.Is(err, fencing.ErrForeignTrigger) {
		t.Fatalf("a guarded insert that a foreign trigger rewrote to token 1: %v, want ErrForeignTrigger", err)
	}
	if n := rowCount(t, e.admin, "fresh"); n != 0 {
		t.Fatalf("the rewritten fence was kept (%d rows)", n)
	}
}

func rowCount(t *testing.T, db fencing.DB, resource string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM distlock_fence WHERE resource = $1`, resource).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Migrate run by a role that has the owner's rights without being it (a
// member of the owner role, or a superuser, a common way to run
// migrations) leaves the trigger function owned by the table's owner, so
// the table counts as current for every role afterwards.
func TestMigrateByOwnerMemberOrSuperuserLeavesTableCurrent(t *testing.T) {
	ctx := context.Background()
	e := bypassSetup(t)
	mustExec(t, e.admin, `CREATE ROLE deployer LOGIN PASSWORD 'deployer-bypass-pw' IN ROLE fence_owner`)
	deployer := rolePool(t, e.s.RoleDSN("deployer", "deployer-bypass-pw"), nil)
	mustExec(t, e.owner, previousRelease)
	e.s.GrantRuntime(t, "distlock_fence")
	for _, m := range []struct {
		name string
		db   *pgxpool.Pool
	}{{"member of the owner role", deployer}, {"superuser", e.admin}} {
		mustExec(t, e.owner, `DROP TRIGGER IF EXISTS distlock_fence_no_truncate ON distlock_fence`)
		for range 2 {
			if err := fencing.Migrate(ctx, m.db); err != nil {
				t.Fatalf("Migrate by a %s: %v", m.name, err)
			}
		}
		if err := fencing.Migrate(ctx, e.owner); err != nil {
			t.Fatalf("owner's Migrate after a %s's: %v", m.name, err)
		}
		if err := fencing.Migrate(ctx, e.app); err != nil {
			t.Fatalf("runtime Migrate after a %s's: %v", m.name, err)
		}
	}
	wantStaleAfterCurrent(t, e)
}

// Two applications, each with its own fence table and migrating role, in
// one schema: each table gets a trigger function of its own, owned by its
// owner, so both migrate and both stay current.
func TestTwoFenceTableOwnersInOneSchema(t *testing.T) {
	ctx := context.Background()
	e := bypassSetup(t)
	if err := fencing.Migrate(ctx, e.owner); err != nil {
		t.Fatal(err)
	}
	e.s.GrantRuntime(t, "distlock_fence")
	mustExec(t, e.admin, `CREATE ROLE owner2 LOGIN PASSWORD 'owner2-bypass-pw'`)
	mustExec(t, e.admin, `GRANT USAGE, CREATE ON SCHEMA public TO owner2`)
	owner2 := rolePool(t, e.s.RoleDSN("owner2", "owner2-bypass-pw"), nil)
	other, err := fencing.NewTable("billing_fence")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := other.Create(ctx, owner2); err != nil {
			t.Fatalf("owner2's Create of its own fence table billing_fence: %v", err)
		}
		if err := fencing.Migrate(ctx, e.owner); err != nil {
			t.Fatalf("owner's Migrate after owner2's Create: %v", err)
		}
	}
	if _, err := owner2.Exec(ctx, `INSERT INTO billing_fence VALUES ('x', 0, 5, 'h')`); err != nil {
		t.Fatal(err)
	}
	if _, err := owner2.Exec(ctx, `UPDATE billing_fence SET token = 1`); err == nil {
		t.Fatal("billing_fence's fence went down")
	}
	wantStaleAfterCurrent(t, e)
}

// A role without any grant on the fence table that holds an advisory lock
// Migrate's upgrade once took (any role may take any advisory lock) does
// not stall the guards: the upgrade does not wait on it while it holds the
// table.
func TestAdvisoryLockHolderCannotStallGuards(t *testing.T) {
	ctx := context.Background()
	e := bypassSetup(t)
	if err := fencing.Migrate(ctx, e.owner); err != nil {
		t.Fatal(err)
	}
	e.s.GrantRuntime(t, "distlock_fence")
	mustExec(t, e.owner, `DROP TRIGGER distlock_fence_no_truncate ON distlock_fence`) // not current: the next release's upgrade, say
	conn, err := e.tenant.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	mustExec(t, conn, `SELECT pg_advisory_lock(7235441220220052331)`)
	done := make(chan error, 1)
	go func() {
		mctx, cancel := context.WithTimeout(ctx, 6*time.Second)
		defer cancel()
		done <- fencing.Migrate(mctx, e.owner)
	}()
	time.Sleep(500 * time.Millisecond)
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := write(gctx, e.app, "acct", fence(1), "v"); err != nil {
		t.Fatalf("a co-tenant without any grant on the table stalled a guard: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("owner's Migrate: %v", err)
	}
}

// The upgrade waits at most lockTimeout for the table: an open guard
// transaction makes Migrate fail (lock_not_available) instead of queueing
// every later guard behind its ACCESS EXCLUSIVE lock indefinitely.
func TestUpgradeGivesUpOnABusyTable(t *testing.T) {
	ctx := context.Background()
	e := bypassSetup(t)
	if err := fencing.Migrate(ctx, e.owner); err != nil {
		t.Fatal(err)
	}
	e.s.GrantRuntime(t, "distlock_fence")
	mustExec(t, e.owner, `DROP TRIGGER distlock_fence_no_truncate ON distlock_fence`)
	tx, err := e.app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := fencing.Guard(ctx, tx, "acct", fence(1)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = fencing.Migrate(mctx, e.owner)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("Migrate on a table an open transaction holds: %v after %v, want lock_not_available", err, time.Since(start))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Migrate gave up after %v", d)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fencing.Migrate(ctx, e.owner); err != nil {
		t.Fatalf("Migrate once the table is free: %v", err)
	}
}
