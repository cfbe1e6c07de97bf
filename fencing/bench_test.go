package fencing_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
)

// stmtCounter counts the statements a pool sends, to show the guard's cost
// in statements and not only in time.
type stmtCounter struct{ n atomic.Int64 }

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// BenchmarkWrite compares one write with and without the fence, serially on
// one connection. fsync is off so that the commit's disk flush, the same in
// both, does not drown the extra statement.
//
//	tx/unguarded  BEGIN; UPDATE; COMMIT
//	tx/guarded    BEGIN; guard upsert; UPDATE; COMMIT   (WithGuard)
//	row/unguarded UPDATE ... WHERE id = $1              (autocommit)
//	row/fenced    UPDATE ... WHERE id = $1 AND (fence < $2 OR fence = $2 AND holder = $3) (UpdateRow)
func BenchmarkWrite(b *testing.B) {
	s := testserver.Postgres(b, testserver.WithPostgresFsync(false))
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(s.DSN())
	if err != nil {
		b.Fatal(err)
	}
	var stmts stmtCounter
	cfg.ConnConfig.Tracer = &stmts
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := fencing.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	mustExec(b, pool, `CREATE TABLE bench (id int PRIMARY KEY, n bigint NOT NULL, fence bigint NOT NULL DEFAULT 0, holder text)`)
	mustExec(b, pool, `INSERT INTO bench VALUES (1, 0, 0)`)

	update := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE bench SET n = n + 1 WHERE id = 1`)
		return err
	}
	// One holder writing again and again: the equal-token path.
	f := distlock.Fence{Token: 1, Holder: "bench"}
	row := fencing.RowUpdate{Table: pgx.Identifier{"bench"}, Fence: "fence", Holder: "holder",
		Key: []fencing.Column{{Name: "id", Value: 1}}, Set: []fencing.Column{{Name: "n", Value: int64(1)}}}
	cases := []struct {
		name string
		op   func() error
	}{
		{"tx/unguarded", func() error { return pgx.BeginFunc(ctx, pool, update) }},
		{"tx/guarded", func() error { return fencing.WithGuard(ctx, pool, "bench", f, update) }},
		{"row/unguarded", func() error {
			_, err := pool.Exec(ctx, `UPDATE bench SET n = $2 WHERE id = $1`, 1, int64(1))
			return err
		}},
		{"row/fenced", func() error { return fencing.UpdateRow(ctx, pool, row, f) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if err := c.op(); err != nil { // warm the statement cache
				b.Fatal(err)
			}
			var lat []time.Duration
			before := stmts.n.Load()
			for b.Loop() {
				t0 := time.Now()
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			b.ReportMetric(float64(stmts.n.Load()-before)/float64(len(lat)), "stmts/op")
			slices.Sort(lat)
			ms := func(q float64) float64 {
				return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond)
			}
			b.ReportMetric(ms(0.50), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
		})
	}
}
