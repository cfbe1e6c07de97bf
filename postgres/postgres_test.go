package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/postgres"
)

func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// server starts PostgreSQL with the lock table migrated, and returns its
// DSN and a pool for the test's own statements.
func server(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	s := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	admin := newPool(t, s.DSN())
	if err := postgres.Migrate(t.Context(), admin); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(t.Context(), admin); err != nil {
		t.Fatalf("a second Migrate must do nothing: %v", err)
	}
	return s.DSN(), admin
}

func harness(dsn string, admin *pgxpool.Pool, opts ...postgres.Option) conformance.Harness {
	return conformance.Harness{
		NewBackend: func(ctx context.Context) (driver.Backend, error) {
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				return nil, err
			}
			bopts := []distlock.Option{postgres.WithClosePool(true)}
			for _, o := range opts {
				bopts = append(bopts, o)
			}
			return postgres.NewBackend(pool, bopts...)
		},
		ForceExpire: func(ctx context.Context, key string) error {
			_, err := admin.Exec(ctx, `UPDATE distlock_locks SET expires_at = clock_timestamp() WHERE key = $1 AND owner IS NOT NULL`, key)
			return err
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	t.Run("Notify", func(t *testing.T) { conformance.Run(t, harness(dsn, admin)) })
	t.Run("Poll", func(t *testing.T) { conformance.Run(t, harness(dsn, admin, postgres.WithNotify(false))) })
}
