package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/postgres"
)

// Mutual exclusion and rising tokens under the queue: Acquire and
// TryAcquire mixed across three pools, each holder checking through
// WithLease that its token is above the last committed one.
func TestMixedStorm(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	mustExec(t, admin, `CREATE TABLE data (id int PRIMARY KEY, v text NOT NULL)`, `INSERT INTO data VALUES (1, '0')`)
	var holders, maxHolders, grants, acqFail atomic.Int64
	var mu sync.Mutex
	var bad []string
	stop := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	for i := range 3 {
		pool := newPool(t, dsn)
		l := newLocker(t, pool)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					var ls *distlock.Lease
					var err error
					if rand.IntN(3) == 0 {
						ls, err = l.TryAcquire(ctx, "storm", distlock.WithTTL(2*time.Second))
					} else {
						actx, cancel := context.WithTimeout(ctx, 5*time.Second)
						ls, err = l.Acquire(actx, "storm", distlock.WithTTL(2*time.Second))
						cancel()
						if err != nil {
							acqFail.Add(1)
						}
					}
					if err != nil {
						continue
					}
					n := holders.Add(1)
					for m := maxHolders.Load(); n > m && !maxHolders.CompareAndSwap(m, n); m = maxHolders.Load() {
					}
					grants.Add(1)
					err = postgres.WithLease(ctx, pool, ls, func(tx pgx.Tx) error {
						var last int64
						if err := tx.QueryRow(ctx, `SELECT v::bigint FROM data WHERE id = 1`).Scan(&last); err != nil {
							return err
						}
						if int64(ls.Token()) <= last {
							mu.Lock()
							bad = append(bad, fmt.Sprintf("token %d after %d (pool %d)", ls.Token(), last, i))
							mu.Unlock()
						}
						_, err := tx.Exec(ctx, `UPDATE data SET v = $1 WHERE id = 1`, fmt.Sprint(int64(ls.Token())))
						return err
					})
					if err != nil {
						mu.Lock()
						bad = append(bad, "WithLease: "+err.Error())
						mu.Unlock()
					}
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					holders.Add(-1)
					_ = ls.Release(ctx)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d grants, max holders %d, %d Acquires timed out (5s)", grants.Load(), maxHolders.Load(), acqFail.Load())
	if maxHolders.Load() > 1 || len(bad) > 0 {
		t.Fatalf("mutual exclusion / rising tokens under the queue — broken: max holders %d, %d problems, first: %v", maxHolders.Load(), len(bad), bad)
	}
}

// WithLease in every exec mode, and on a pgx.Conn: the connection comes
// back idle and usable.
func TestWithLeaseExecModes(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	mustExec(t, admin, `CREATE TABLE data (id int PRIMARY KEY, v text NOT NULL)`, `INSERT INTO data VALUES (1, 'initial')`)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		pool := onePool(t, dsn, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
		l1, l2 := newLocker(t, pool), newLocker(t, pool)
		key := "m" + fmt.Sprint(int(mode))
		ls, err := l1.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second), distlock.WithValue("v"))
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		done := make(chan error, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			ls2, err := l2.Acquire(actx, key)
			if err == nil {
				err = setRow(ctx, pool, ls2, mode.String())
				_ = ls2.Release(ctx)
			}
			done <- err
		}()
		waitWaiters(t, l1, key, 1)
		if err := setRow(ctx, pool, ls, "first"); err != nil {
			t.Fatalf("%v: WithLease: %v", mode, err)
		}
		_ = ls.Release(ctx)
		if err := <-done; err != nil {
			t.Fatalf("%v: waiter: %v", mode, err)
		}
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st := c.Conn().PgConn().TxStatus(); st != 'I' || dataRow(t, admin) != mode.String() {
			t.Fatalf("%v: pooled conn TxStatus %c, data %q", mode, st, dataRow(t, admin))
		}
		c.Release()
	}
	// A pgx.Conn whose caller's deadline passes just as the commit answers.
	var cancel context.CancelFunc
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = &endTracer{end: func(sql string) {
		if strings.HasSuffix(strings.TrimSpace(sql), "COMMIT") && cancel != nil {
			cancel()
		}
	}}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	l := newLocker(t, newPool(t, dsn))
	ls, err := l.TryAcquire(ctx, "c", distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.WithLease(ctx, conn, ls, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE data SET v = 'conn' WHERE id = 1`)
		return err
	}); err != nil || conn.PgConn().TxStatus() != 'I' {
		t.Fatalf("pgx.Conn: %v, TxStatus %c", err, conn.PgConn().TxStatus())
	}
	cctx, c := context.WithCancel(ctx)
	cancel = c
	err = postgres.WithLease(cctx, conn, ls, func(tx pgx.Tx) error {
		_, err := tx.Exec(cctx, `UPDATE data SET v = 'conn2' WHERE id = 1`)
		return err
	})
	cancel = nil
	committed := dataRow(t, admin) == "conn2"
	if _, xerr := conn.Exec(ctx, `SELECT 1`); xerr != nil {
		t.Fatalf("WithLease's final rollback \"only hands the connection back\" — broken: on a pgx.Conn whose ctx ended just as "+
			"the DO…; COMMIT string answered, WithLease returned %v (committed: %v) and the caller's connection is now "+
			"closed (tx.Rollback(ctx) failed on the ended ctx, and pgx kills the conn): next Exec: %v", err, committed, xerr)
	}
}

type endTracer struct{ end func(string) }

func (e *endTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, d.SQL)
}
func (e *endTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(sqlKey{}).(string); ok {
		e.end(s)
	}
}

type sqlKey struct{}
