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
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/postgres"
)

// A failover to an asynchronous replica that missed the latest grant drops
// that grant (RestartLosesLocks), yet tokens keep rising: the next holder's
// token is above the lost one, so the fence refuses the holder whose grant
// was lost and accepts the new one.
func TestFailoverToLaggingReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	setup := newPool(t, primary.DSN())
	if err := postgres.Migrate(ctx, setup); err != nil {
		t.Fatal(err)
	}
	if err := fencing.Migrate(ctx, setup); err != nil {
		t.Fatal(err)
	}
	mustExec(t, setup, `CREATE TABLE data (id int PRIMARY KEY, v text NOT NULL)`, `INSERT INTO data VALUES (1, 'initial')`)
	replica := testserver.PostgresReplica(t, primary)

	old := newPool(t, primary.DSN())
	a := newLocker(t, old)
	first, err := a.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := guardedWrite(ctx, old, first, "by the first holder"); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitReplayed(t, setup, replica)

	cutReplication(t, replica) // it misses what follows
	lost, err := a.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := guardedWrite(ctx, old, lost, "by the holder the failover forgets"); err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := replica.Promote(pctx); err != nil {
		t.Fatal(err)
	}

	promoted := newPool(t, replica.DSN())
	b := newLocker(t, promoted)
	if h, err := b.Inspect(ctx, "job"); err != nil || h.Held {
		t.Fatalf("after the failover Inspect = %+v, %v: want the lost grant gone (RestartLosesLocks)", h, err)
	}
	if !b.Guarantees().RestartLosesLocks {
		t.Fatal("Guarantees says no lock is lost on failover")
	}
	next, err := b.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= lost.Token() {
		t.Fatalf("token %d after the failover, not above the lost grant's %d", next.Token(), lost.Token())
	}
	if err := guardedWrite(ctx, promoted, next, "by the new holder"); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	if err := guardedWrite(ctx, promoted, lost, "stale"); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the forgotten holder's write: %v, want ErrStaleToken", err)
	}
	if got := dataRow(t, promoted); got != "by the new holder" {
		t.Fatalf("data = %q", got)
	}
}

func guardedWrite(ctx context.Context, pool *pgxpool.Pool, lease *distlock.Lease, v string) error {
	return fencing.WithGuard(ctx, pool, "job", lease.Fence(), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE data SET v = $1 WHERE id = 1`, v)
		return err
	})
}

// waitReplayed waits until replica has replayed everything primary wrote.
func waitReplayed(t *testing.T, primary *pgxpool.Pool, replica *testserver.Server) {
	t.Helper()
	var lsn string
	if err := primary.QueryRow(t.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	r := newPool(t, replica.DSN())
	for deadline := time.Now().Add(30 * time.Second); ; {
		var caught bool
		err := r.QueryRow(t.Context(), `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&caught)
		if err == nil && caught {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not replay %s in 30s: %v", lsn, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cutReplication stops replica's WAL receiver for good: it keeps what it
// has replayed and hears nothing more of its primary.
func cutReplication(t *testing.T, replica *testserver.Server) {
	t.Helper()
	r := newPool(t, replica.DSN())
	mustExec(t, r, `ALTER SYSTEM SET primary_conninfo = ''`, `SELECT pg_reload_conf()`)
	for deadline := time.Now().Add(30 * time.Second); ; {
		var receivers int
		err := r.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_wal_receiver`).Scan(&receivers)
		if err == nil && receivers == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica still receives WAL after 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
