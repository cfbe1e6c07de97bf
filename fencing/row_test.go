package fencing_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
)

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
	accepted, stale, _ := contend(t, workers, rounds, func(token distlock.Token) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
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
	})
	var n int64
	if err := pool.QueryRow(ctx, `SELECT n FROM counters WHERE id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits, %d stale rejections, counter %d", accepted, stale, n)
	if accepted == 0 || n != accepted {
		t.Fatalf("counter = %d, commits = %d: want equal and positive", n, accepted)
	}
}
