package all_test

import (
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/postgres"
	"github.com/distlock/distlock/redis"
	"github.com/jackc/pgx/v5/pgxpool"
)

func redisPrefix() distlock.Option { return redis.WithKeyPrefix("x:") }

// migrate creates the postgres backend's lock table on the server of dsn.
func migrate(t *testing.T, dsn string) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
}
