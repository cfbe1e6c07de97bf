package fencing_test

import (
	"context"
	"errors"
	"log"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/memory"
)

// A lock-protected read-modify-write: the fence is the first statement of
// the transaction, the read comes after it.
func ExampleWithGuard() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := fencing.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	locker, err := memory.New() // or distlock.Open(ctx, url) for any backend
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	const key = "account/42"
	err = locker.Do(ctx, key, func(ctx context.Context, lease *distlock.Lease) error {
		return fencing.WithGuard(ctx, pool, key, lease.Fence(), func(tx pgx.Tx) error {
			var balance int64
			if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 42`).Scan(&balance); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE accounts SET balance = $1 WHERE id = 42`, balance+10)
			return err
		})
	})
	if errors.Is(err, fencing.ErrStaleToken) {
		log.Print("a newer holder has written; our lock was gone and nothing was changed")
	} else if err != nil {
		log.Fatal(err)
	}
}

// Guard in a transaction you manage yourself.
func ExampleGuard() {
	ctx := context.Background()
	var pool *pgxpool.Pool // your pool
	var lease *distlock.Lease

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if err := fencing.Guard(ctx, tx, lease.Key(), lease.Fence()); err != nil {
		log.Fatal(err) // ErrStaleToken: roll back, do not retry with this lease
	}
	// ... reads and writes of the resource ...
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// A fence table with another name, created at start-up.
func ExampleNewTable() {
	ctx := context.Background()
	var pool *pgxpool.Pool // your pool

	var lease *distlock.Lease

	fences, err := fencing.NewTable("app", "fences")
	if err != nil {
		log.Fatal(err)
	}
	// Creates the table, or adds the holder column to one an earlier
	// version created.
	if err := fences.Create(ctx, pool); err != nil {
		log.Fatal(err)
	}
	_ = fences.WithGuard(ctx, pool, "report/daily", lease.Fence(), func(tx pgx.Tx) error { return nil })
}

// The hot-row form: the row carries its own fence column. Claim the fence
// right after acquiring (no columns to set), then read, then write.
func ExampleUpdateRow() {
	ctx := context.Background()
	var pool *pgxpool.Pool // your pool
	var lease *distlock.Lease

	row := fencing.RowUpdate{
		Table:  pgx.Identifier{"accounts"},
		Fence:  "fence",        // bigint NOT NULL DEFAULT 0
		Holder: "fence_holder", // text: tells equal tokens apart
		Key:    []fencing.Column{{Name: "id", Value: 42}},
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The claim and the write below carry the same fence: the second
		// passes because the holder is the one that wrote the token.
		if err := fencing.UpdateRow(ctx, tx, row, lease.Fence()); err != nil {
			return err // claim first: ErrStaleToken or ErrRowNotFound
		}
		var balance int64
		if err := tx.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 42`).Scan(&balance); err != nil {
			return err
		}
		row.Set = []fencing.Column{{Name: "balance", Value: balance + 10}}
		return fencing.UpdateRow(ctx, tx, row, lease.Fence())
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Where no Lease travels — here a command run by `distlock run`, which puts
// the lease's fence in its environment — carry the token and the holder
// together and rebuild the Fence.
func ExampleWithGuard_childProcess() {
	ctx := context.Background()
	var pool *pgxpool.Pool // your pool

	token, err := strconv.ParseInt(os.Getenv("DISTLOCK_TOKEN"), 10, 64)
	if err != nil {
		log.Fatal(err)
	}
	fence := distlock.Fence{Token: distlock.Token(token), Holder: os.Getenv("DISTLOCK_HOLDER")}
	err = fencing.WithGuard(ctx, pool, os.Getenv("DISTLOCK_KEY"), fence, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE reports SET done = true WHERE day = current_date`)
		return err
	})
	if err != nil {
		log.Fatal(err) // ErrInvalid too if DISTLOCK_HOLDER was not set
	}
}
