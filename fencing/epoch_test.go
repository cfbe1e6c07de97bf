package fencing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	_ "github.com/distlock/distlock/memory"
)

// epochFence is fence(tok) at fence epoch e.
func epochFence(e int64, tok distlock.Token) distlock.Fence {
	f := fence(tok)
	f.Epoch = e
	return f
}

// testEpochFirst: the fence compares (epoch, token). A larger epoch passes
// whatever its token, and from then on every fence of a smaller epoch is
// stale, whatever its token; within an epoch, tokens and holders decide as
// before.
func testEpochFirst(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "epoch-first"
	old := epochFence(0, 1795821249000858) // a Redis token: µs since 1970
	if err := write(ctx, pool, r, old, "old deployment"); err != nil {
		t.Fatal(err)
	}
	moved := epochFence(1, 2) // an etcd revision, after the move
	if err := write(ctx, pool, r, moved, "new deployment"); err != nil {
		t.Fatalf("the first write at a larger epoch: %v", err)
	}
	// The old deployment's holder, still running, with a larger token.
	err := write(ctx, pool, r, epochFence(0, old.Token+1), "stale")
	wantEpochStale(t, err, 0, 1)
	if got := value(t, pool, r); got != "new deployment" {
		t.Fatalf("value %q after the stale write, want the new deployment's", got)
	}
	// Within the new epoch: the same holder again, a larger token, then an
	// equal token from another holder and a smaller one are refused.
	if err := write(ctx, pool, r, moved, "again"); err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, pool, r, epochFence(1, 3), "next"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, write(ctx, pool, r, epochFence(1, 2), "older"), 2, 3)
	wantOtherHolder(t, write(ctx, pool, r, distlock.Fence{Epoch: 1, Token: 3, Holder: "intruder"}, "x"),
		distlock.Fence{Epoch: 1, Token: 3, Holder: "intruder"}, epochFence(1, 3))
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM distlock_fence WHERE resource = $1 AND epoch = 1`, r).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("fence rows of %q at epoch 1: %d, %v", r, rows, err)
	}
	if err := write(ctx, pool, r, epochFence(-1, 5), "x"); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("a negative epoch: %v, want ErrInvalid", err)
	}
}

// wantEpochStale checks a refusal by a larger stored epoch, and that the
// message says so.
func wantEpochStale(t testing.TB, err error, epoch, stored int64) {
	t.Helper()
	var se *fencing.StaleTokenError
	if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("want a *StaleTokenError, got %v", err)
	}
	if se.Epoch != epoch || se.StoredEpoch != stored {
		t.Fatalf("StaleTokenError{Epoch: %d, StoredEpoch: %d}, want {%d, %d}", se.Epoch, se.StoredEpoch, epoch, stored)
	}
	if !strings.Contains(err.Error(), "fence epoch") {
		t.Fatalf("error %q does not name the epochs", err)
	}
}

// testEpochRow: UpdateRow compares (epoch, fence) with an Epoch column, and
// without one takes only epoch-0 fences.
func testEpochRow(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE epoch_accounts (id int PRIMARY KEY, balance int NOT NULL,
		fence bigint NOT NULL DEFAULT 0, fence_holder text, fence_epoch bigint NOT NULL DEFAULT 0)`)
	mustExec(t, pool, `INSERT INTO epoch_accounts (id, balance) VALUES (1, 0)`)
	u := func(balance int, withEpoch bool) fencing.RowUpdate {
		r := fencing.RowUpdate{Table: pgx.Identifier{"epoch_accounts"}, Fence: "fence", Holder: "fence_holder",
			Key: []fencing.Column{{Name: "id", Value: 1}}, Set: []fencing.Column{{Name: "balance", Value: balance}}}
		if withEpoch {
			r.Epoch = "fence_epoch"
		}
		return r
	}
	if err := fencing.UpdateRow(ctx, pool, u(10, true), epochFence(0, 1795821249000858)); err != nil {
		t.Fatal(err)
	}
	if err := fencing.UpdateRow(ctx, pool, u(20, true), epochFence(1, 2)); err != nil {
		t.Fatalf("the first write at a larger epoch: %v", err)
	}
	wantEpochStale(t, fencing.UpdateRow(ctx, pool, u(30, true), epochFence(0, 1795821249000859)), 0, 1)
	if err := fencing.UpdateRow(ctx, pool, u(40, true), epochFence(1, 2)); err != nil {
		t.Fatalf("the same holder again: %v", err)
	}
	var balance, epoch int64
	if err := pool.QueryRow(ctx, `SELECT balance, fence_epoch FROM epoch_accounts WHERE id = 1`).Scan(&balance, &epoch); err != nil {
		t.Fatal(err)
	}
	if balance != 40 || epoch != 1 {
		t.Fatalf("row balance %d epoch %d, want 40 at epoch 1", balance, epoch)
	}
	if err := fencing.UpdateRow(ctx, pool, u(50, false), epochFence(1, 3)); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("an epoch-1 fence without an Epoch column: %v, want ErrInvalid", err)
	}
	bad := u(50, true)
	bad.Epoch = "fence"
	if err := fencing.UpdateRow(ctx, pool, bad, epochFence(1, 3)); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("the epoch column named as the fence column: %v, want ErrInvalid", err)
	}
}

// testUpgradeAddsEpoch: a table of the previous version (holder, no epoch)
// gets the epoch column from Migrate with its rows kept at epoch 0, so the
// first write at epoch 1 passes over the old row without deleting it.
func testUpgradeAddsEpoch(t *testing.T, pool *pgxpool.Pool, dsn string) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE SCHEMA holderonly`)
	db := schemaPool(t, dsn, "holderonly", 4)
	mustExec(t, db, `CREATE TABLE distlock_fence (resource text PRIMARY KEY, token bigint NOT NULL, holder text)`)
	mustExec(t, db, `INSERT INTO distlock_fence VALUES ('kept', 1795821249000858, 'h')`)
	if err := fencing.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	var epoch, token int64
	if err := db.QueryRow(ctx, `SELECT epoch, token FROM distlock_fence WHERE resource = 'kept'`).Scan(&epoch, &token); err != nil {
		t.Fatal(err)
	}
	if epoch != 0 || token != 1795821249000858 {
		t.Fatalf("the old row after Migrate: epoch %d token %d", epoch, token)
	}
	fn := func(pgx.Tx) error { return nil }
	wantStale(t, fencing.WithGuard(ctx, db, "kept", fence(5), fn), 5, 1795821249000858)
	if err := fencing.WithGuard(ctx, db, "kept", epochFence(1, 5), fn); err != nil {
		t.Fatalf("epoch 1 over the kept row: %v", err)
	}
	if err := fencing.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate on the current table: %v", err)
	}
}

// memChildEnv makes the test binary a process of testMemoryRestart: it
// takes the lock on mem://, writes through the fence, prints the fence and
// exits.
const memChildEnv = "FENCING_MEM_CHILD_DSN"

// testMemoryRestart: mem:// in two processes, one after the other, as a
// single-replica service restarted. The second process's first guarded
// write is accepted (its tokens come from the wall clock, past the first
// process's), and a write with the first process's fence is refused.
func testMemoryRestart(t *testing.T, pool *pgxpool.Pool, dsn string) {
	ctx := context.Background()
	run := func() distlock.Fence {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMemoryProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), memChildEnv+"="+dsn)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("process: %v\n%s", err, out)
		}
		var f distlock.Fence
		_, line, _ := bytes.Cut(out, []byte("fence: "))
		if _, err := fmt.Sscan(string(line), &f.Epoch, &f.Token, &f.Holder); err != nil {
			t.Fatalf("process printed %q: %v", out, err)
		}
		return f
	}
	first := run()
	second := run()
	if second.Token <= first.Token {
		t.Fatalf("the restarted process's token %d is not above the first's %d", second.Token, first.Token)
	}
	wantStale(t, write(ctx, pool, "mem-restart", first, "stale"), first.Token, second.Token)
	if got := value(t, pool, "mem-restart"); got != second.Holder {
		t.Fatalf("value %q, want the restarted process's write", got)
	}
}

// TestMemoryProcess is one process of testMemoryRestart; it does nothing
// unless that test started it.
func TestMemoryProcess(t *testing.T) {
	dsn := os.Getenv(memChildEnv)
	if dsn == "" {
		t.Skip("run by the MemoryRestart subtest of TestFencing")
	}
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l, err := distlock.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.Acquire(ctx, "mem-restart")
	if err != nil {
		t.Fatal(err)
	}
	f := ls.Fence()
	if err := write(ctx, pool, "mem-restart", f, f.Holder); err != nil {
		t.Fatalf("the process's first guarded write: %v", err)
	}
	fmt.Printf("fence: %d %d %s\n", f.Epoch, f.Token, f.Holder)
}
