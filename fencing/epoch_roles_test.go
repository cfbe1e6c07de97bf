package fencing_test

// Fence epochs and Migrate against a real PostgreSQL: roles, sessions and
// isolation levels.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
)

func rolePool(t *testing.T, dsn string, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		if k == "user" {
			cfg.ConnConfig.User = v
			continue
		}
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.MaxConns = 8
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestEpochsUnderRolesAndIsolation(t *testing.T) {
	s := testserver.Postgres(t)
	ctx := context.Background()
	pool := rolePool(t, s.DSN(), nil)
	if err := fencing.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, `CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, n bigint NOT NULL DEFAULT 0)`)

	// Migrate "must stay a read-only no-op on a current table" and succeed
	// for a role with only SELECT/INSERT/UPDATE on the fence table (the
	// runtime role of the least-privilege section of DESIGN.md).
	t.Run("MigrateByRuntimeRoleOnCurrentTable", func(t *testing.T) {
		mustExec(t, pool, `CREATE ROLE app LOGIN`)
		mustExec(t, pool, `GRANT USAGE ON SCHEMA public TO app`)
		mustExec(t, pool, `GRANT SELECT, INSERT, UPDATE ON distlock_fence TO app`)
		app := rolePool(t, s.DSN(), map[string]string{"user": "app"})
		var canCreate bool
		if err := pool.QueryRow(ctx, `SELECT has_schema_privilege('app', 'public', 'CREATE')`).Scan(&canCreate); err != nil || canCreate {
			t.Fatalf("app may create in public (%v, %v): the test needs a role that may not", canCreate, err)
		}
		// The runtime role can do everything Guard needs...
		if err := fencing.WithGuard(ctx, app, "rt", fence(1), func(pgx.Tx) error { return nil }); err != nil {
			t.Fatalf("a guarded write by the runtime role: %v", err)
		}
		// ...and Migrate, on a current table, has nothing to do.
		if err := fencing.Migrate(ctx, app); err != nil {
			t.Fatalf("Migrate by a role with SELECT/INSERT/UPDATE on a current table: %v", err)
		}
	})
	t.Run("MigrateReadOnlyOnCurrentTable", func(t *testing.T) {
		ro := rolePool(t, s.DSN(), map[string]string{"default_transaction_read_only": "on"})
		if err := fencing.Migrate(ctx, ro); err != nil {
			t.Fatalf("Migrate on a current table, read-only session (a hot standby, a read-only role): %v", err)
		}
	})

	// Many guarded transactions on one resource at two epochs, each logging
	// (epoch, token) inside its transaction; the accepted ones, in log
	// order (the fence row lock orders them), must never go down in
	// (epoch, token), whatever the isolation level.
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		t.Run("TwoEpochsConcurrent/"+string(iso), func(t *testing.T) {
			res := "conc-" + string(iso)
			tbl := fmt.Sprintf("log_%d", rand.IntN(1e9))
			mustExec(t, pool, `CREATE TABLE `+tbl+` (seq bigserial PRIMARY KEY, epoch bigint, token bigint, holder text)`)
			var wg sync.WaitGroup
			var mu sync.Mutex
			accepted, stale, other := 0, 0, 0
			var firstOther error
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 31))
					for i := range 60 {
						var f distlock.Fence
						// Tokens grow with i in both epochs; the new epoch
						// gets likelier as the run goes on, and the old
						// deployment keeps writing (paused holders waking).
						tok := i*8 + w + r.IntN(8)
						if r.IntN(60) >= i {
							f = distlock.Fence{Epoch: 0, Token: distlock.Token(1795821249000000 + tok), Holder: fmt.Sprintf("o-%d-%d", w, i)}
						} else {
							f = distlock.Fence{Epoch: 1, Token: distlock.Token(1 + tok), Holder: fmt.Sprintf("n-%d-%d", w, i)}
						}
						tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
						if err != nil {
							panic(err)
						}
						err = fencing.Guard(ctx, tx, res, f)
						if err == nil {
							_, err = tx.Exec(ctx, `INSERT INTO `+tbl+` (epoch, token, holder) VALUES ($1, $2, $3)`, f.Epoch, int64(f.Token), f.Holder)
						}
						if err == nil {
							err = tx.Commit(ctx)
						} else {
							_ = tx.Rollback(ctx)
						}
						mu.Lock()
						switch {
						case err == nil:
							accepted++
						case errors.Is(err, fencing.ErrStaleToken):
							stale++
						default:
							other++
							if firstOther == nil {
								firstOther = err
							}
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			t.Logf("%s: accepted %d, stale %d, other errors %d (first: %v)", iso, accepted, stale, other, firstOther)
			rows, err := pool.Query(ctx, `SELECT epoch, token FROM `+tbl+` ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			var pe, pt int64 = -1, -1
			n := 0
			for rows.Next() {
				var e, tk int64
				if err := rows.Scan(&e, &tk); err != nil {
					t.Fatal(err)
				}
				if e < pe || (e == pe && tk < pt) {
					t.Fatalf("write %d at (%d, %d) accepted after (%d, %d)", n, e, tk, pe, pt)
				}
				pe, pt = e, tk
				n++
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
		})
	}

	// UpdateRow with NULL epoch and NULL fence in the user's row: both
	// count as 0 for every comparison and the error path.
	t.Run("UpdateRowNulls", func(t *testing.T) {
		mustExec(t, pool, `CREATE TABLE nul (id int PRIMARY KEY, v int, fence bigint, h text, e bigint)`)
		mustExec(t, pool, `INSERT INTO nul VALUES (1, 0, NULL, NULL, NULL), (2, 0, 5, NULL, NULL), (3, 0, NULL, NULL, 1)`)
		u := func(id int) fencing.RowUpdate {
			return fencing.RowUpdate{Table: pgx.Identifier{"nul"}, Fence: "fence", Holder: "h", Epoch: "e",
				Key: []fencing.Column{{Name: "id", Value: id}}, Set: []fencing.Column{{Name: "v", Value: id}}}
		}
		if err := fencing.UpdateRow(ctx, pool, u(1), fence(1)); err != nil {
			t.Fatalf("NULL epoch and fence, epoch-0 token 1: %v", err)
		}
		// (NULL->0, 5, NULL holder): an equal token is refused, a larger passes.
		err := fencing.UpdateRow(ctx, pool, u(2), fence(5))
		wantStale(t, err, 5, 5)
		if err := fencing.UpdateRow(ctx, pool, u(2), distlock.Fence{Epoch: 1, Token: 1, Holder: "x"}); err != nil {
			t.Fatalf("epoch 1 over (NULL, 5): %v", err)
		}
		// (1, NULL->0): an epoch-0 fence is refused, and says why.
		err = fencing.UpdateRow(ctx, pool, u(3), fence(99))
		var se *fencing.StaleTokenError
		if !errors.As(err, &se) || se.StoredEpoch != 1 {
			t.Fatalf("epoch 0 over (1, NULL): %v (%+v)", err, se)
		}
		t.Logf("message: %v", err)
	})
}

// The stale holder's write interleaved with the first new-epoch write:
// the old holder's guard runs first and holds the row; the new epoch's
// waits and then passes; the old holder's second write is refused.
func TestEpochOldHolderBetweenNewWrites(t *testing.T) {
	s := testserver.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := rolePool(t, s.DSN(), nil)
	if err := fencing.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	old := distlock.Fence{Token: 1795821249000858, Holder: "old"}
	nw := distlock.Fence{Epoch: 1, Token: 2, Holder: "new"}
	txOld, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := fencing.Guard(ctx, txOld, "r", old); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- fencing.WithGuard(ctx, pool, "r", nw, func(pgx.Tx) error { return nil })
	}()
	time.Sleep(200 * time.Millisecond)
	if err := txOld.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the first new-epoch write, queued behind the stale holder's: %v", err)
	}
	err = fencing.WithGuard(ctx, pool, "r", old, func(pgx.Tx) error { return nil })
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the old holder after the new epoch's write: %v", err)
	}
}

// Concurrent Migrate on a table of the previous version's shape (holder,
// no epoch): every Migrate finds the epoch column missing, and all their
// ALTERs queue on the table lock a transaction holds.
func TestConcurrentMigrateAddsEpoch(t *testing.T) {
	s := testserver.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := rolePool(t, s.DSN(), nil)
	mustExec(t, pool, `CREATE TABLE distlock_fence (resource text PRIMARY KEY, token bigint NOT NULL, holder text)`)
	mustExec(t, pool, `INSERT INTO distlock_fence VALUES ('kept', 1795821249000858, 'h')`)
	const n = 6
	db := rolePool(t, s.DSN(), nil)
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	mustExec(t, blocker, `LOCK TABLE distlock_fence IN ACCESS EXCLUSIVE MODE`)
	errs := make(chan error, n)
	for range n {
		go func() { errs <- fencing.Migrate(ctx, db) }()
	}
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, 'ALTER TABLE') > 0`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == n {
			break
		}
		select {
		case err := <-errs:
			t.Fatalf("a Migrate returned (%v) before all waited", err)
		case <-ctx.Done():
			t.Fatalf("%d of %d waited", waiting, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Migrate on the holder-only table: %v", err)
		}
	}
	var epoch int64
	if err := pool.QueryRow(ctx, `SELECT epoch FROM distlock_fence WHERE resource = 'kept'`).Scan(&epoch); err != nil || epoch != 0 {
		t.Fatalf("kept row epoch %d, %v", epoch, err)
	}
	wantStale(t, fencing.WithGuard(ctx, pool, "kept", fence(5), func(pgx.Tx) error { return nil }), 5, 1795821249000858)
	if err := fencing.WithGuard(ctx, pool, "kept", distlock.Fence{Epoch: 1, Token: 5, Holder: "n"}, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// The runtime role (SELECT, INSERT, UPDATE on the fence table the migrating
// role made in public) often has a schema of its own name, first on the
// default search_path ("$user", public). Its Migrate must find public's
// table and change nothing: a CREATE TABLE IF NOT EXISTS run before looking
// made an empty table in its own schema, which its later guards used: as
// if every fence row had been deleted.
func TestMigrateByRuntimeRoleKeepsTheRealTable(t *testing.T) {
	s := testserver.Postgres(t)
	ctx := context.Background()
	pool := rolePool(t, s.DSN(), nil)
	if err := fencing.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, `CREATE ROLE app LOGIN`)
	mustExec(t, pool, `CREATE SCHEMA app AUTHORIZATION app`)
	mustExec(t, pool, `GRANT USAGE ON SCHEMA public TO app`)
	mustExec(t, pool, `GRANT SELECT, INSERT, UPDATE ON public.distlock_fence TO app`)
	app := rolePool(t, s.DSN(), map[string]string{"user": "app"})
	noop := func(pgx.Tx) error { return nil }
	if err := fencing.WithGuard(ctx, app, "acct", fence(6), noop); err != nil {
		t.Fatal(err)
	}
	wantStale(t, fencing.WithGuard(ctx, app, "acct", fence(5), noop), 5, 6)
	// A process of the app starts and runs Migrate, as the doc allows
	// ("safe to run at every start-up").
	if err := fencing.Migrate(ctx, app); err != nil {
		t.Fatalf("Migrate by the runtime role: %v", err)
	}
	var tables []string
	rows, _ := pool.Query(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'distlock_fence' ORDER BY 1`)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		tables = append(tables, s)
	}
	var sp string
	_ = app.QueryRow(ctx, `SELECT current_schemas(true)::text || ' user ' || current_user`).Scan(&sp)
	t.Logf("fence tables in schemas %v; app's search_path %s", tables, sp)
	// The stale holder's process (new connections: cached plans of the
	// earlier ones still name public's table).
	stale := rolePool(t, s.DSN(), map[string]string{"user": "app"})
	err := fencing.WithGuard(ctx, stale, "acct", fence(5), noop)
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("after Migrate by the runtime role on a current table, the stale holder (token 5, the fence at 6) writes: %v; fence tables now in schemas %v", err, tables)
	}
}
