package main

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // database/sql driver "postgres": the one pglock.New accepts

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/postgres"
)

func init() {
	pgURL := func(a []string) string { return pgDSN(a[0]) }
	pairs = append(pairs,
		&pair{id: "postgres", title: "postgres vs cirello.io/pglock", kind: testserver.KindPostgres, servers: 1,
			backend: "postgres", url: pgURL, peer: side{name: "cirello.io/pglock", open: openPglock}},
		&pair{id: "postgres-advisory", title: "postgres vs pg_advisory_lock", kind: testserver.KindPostgres, servers: 1,
			backend: "postgres", url: pgURL, peer: side{name: "session pg_advisory_lock", open: openAdvisory}})
}

func pgDSN(addr string) string { return "postgres://postgres@" + addr + "/postgres?sslmode=disable" }

// preparePostgres creates both sides' lock tables on the server at addr.
func preparePostgres(ctx context.Context, addr string) error {
	pool, err := pgxpool.New(ctx, pgDSN(addr))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		return err
	}
	db, err := sql.Open("postgres", pgDSN(addr))
	if err != nil {
		return err
	}
	defer db.Close()
	c, err := pglock.New(db)
	if err != nil {
		return err
	}
	return c.TryCreateTable()
}

// cirello.io/pglock: a client per worker on its own database/sql pool
// (lib/pq, the driver pglock.New accepts), leases of the common TTL without
// heartbeats (distlock's side does not renew either), and ReleaseContext.
// Its AcquireContext waits a whole lease duration (10 s here) between
// attempts, so the waiting side tries with FailIfLocked every 5 ms instead,
// as the redislock side does.

type pglockClient struct {
	db *sql.DB
	c  *pglock.Client
}

func openPglock(_ context.Context, addrs []string, _ config) (client, error) {
	db, err := sql.Open("postgres", pgDSN(addrs[0]))
	if err != nil {
		return nil, err
	}
	c, err := pglock.New(db, pglock.WithLeaseDuration(ttl), pglock.WithHeartbeatFrequency(0))
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &pglockClient{db: db, c: c}, nil
}

func (c *pglockClient) lock(ctx context.Context, key string) (any, error) {
	for {
		l, err := c.c.AcquireContext(ctx, "peerbench:"+key, pglock.FailIfLocked())
		if !errors.Is(err, pglock.ErrNotAcquired) || ctx.Err() != nil {
			return l, err
		}
		select {
		case <-time.After(pglockRetry):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pglockRetry is the pglock side's pause between attempts while waiting.
const pglockRetry = 5 * time.Millisecond

func (c *pglockClient) unlock(ctx context.Context, h any) error {
	return c.c.ReleaseContext(ctx, h.(*pglock.Lock))
}
func (c *pglockClient) close() error { return c.db.Close() }

// Session advisory locks, the floor a user could write by hand: one
// connection per worker, pg_advisory_lock (the server queues waiters and
// wakes the next) and pg_advisory_unlock. No TTL, no token: a lock lasts
// as long as its connection.

type advisoryClient struct{ conn *pgx.Conn }

func openAdvisory(ctx context.Context, addrs []string, _ config) (client, error) {
	conn, err := pgx.Connect(ctx, pgDSN(addrs[0]))
	if err != nil {
		return nil, err
	}
	return &advisoryClient{conn}, nil
}

func (c *advisoryClient) lock(ctx context.Context, key string) (any, error) {
	_, err := c.conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", key)
	if err != nil && ctx.Err() != nil {
		// The connection is unusable after a cancelled call: a new one
		// next time, and the lock (if it came) goes with the old.
		_ = c.conn.Close(context.Background())
		nctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, cerr := pgx.Connect(nctx, c.conn.Config().ConnString())
		if cerr == nil {
			c.conn = conn
		}
		return nil, errors.Join(err, cerr)
	}
	return key, err
}

func (c *advisoryClient) unlock(ctx context.Context, h any) error {
	var ok bool
	if err := c.conn.QueryRow(ctx, "SELECT pg_advisory_unlock(hashtext($1))", h.(string)).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("pg_advisory_unlock: not held")
	}
	return nil
}
func (c *advisoryClient) close() error { return c.conn.Close(context.Background()) }
