package postgres_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/postgres"
)

// A job that runs on one replica at a time and whose writes commit only
// while it holds the lock. (No Output: it needs a server.)
func ExampleWithLease() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil { // once, as the table's owner
		log.Fatal(err)
	}
	locker, err := postgres.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	err = postgres.WithLease(ctx, pool, lease, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE reports SET done = now() WHERE name = 'nightly'`)
		return err
	})
	if err != nil {
		log.Fatal(err) // ErrLeaseExpired: the lease ended first; nothing was written
	}
}

// Open, with the backend chosen by configuration.
func Example_open() {
	locker, err := distlock.Open(context.Background(), "postgres://app@localhost:5432/app?table=app.locks")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
}
