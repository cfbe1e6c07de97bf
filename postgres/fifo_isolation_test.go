package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
)

// First-come order under REPEATABLE READ and SERIALIZABLE default
// isolation, where an attempt can fail with a serialization failure or a
// deadlock as the waiters wake together.
func TestFirstComeOrderUnderIsolation(t *testing.T) {
	for _, iso := range []string{"repeatable read", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			dsn, admin := server(t)
			ctx := t.Context()
			mustExec(t, admin, `ALTER DATABASE postgres SET default_transaction_isolation TO '`+iso+`'`)
			holder := newLocker(t, newPool(t, dsn))
			held, err := holder.TryAcquire(ctx, "fifo", distlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			const n = 6
			order := make(chan int, n)
			conflicts := &conflictTracer{}
			for i := range n {
				l := newLocker(t, onePool(t, dsn, func(c *pgxpool.Config) {
					c.MaxConns = 4
					c.ConnConfig.Tracer = conflicts
				}))
				go func() {
					ls, err := l.Acquire(ctx, "fifo", distlock.WithTTL(time.Minute))
					if err != nil {
						order <- -1
						return
					}
					order <- i
					time.Sleep(20 * time.Millisecond)
					_ = ls.Release(ctx)
				}()
				waitWaiters(t, holder, "fifo", i+1)
			}
			start := time.Now()
			_ = held.Release(ctx)
			for want := range n {
				if got := <-order; got != want {
					t.Fatalf("FIFO under %s: grant %d went to %d (statements failed with 40001: %d, 40P01: %d)",
						iso, want, got, conflicts.serialization.Load(), conflicts.deadlock.Load())
				}
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("FIFO under %s: hand-offs took %v", iso, d)
			}
		})
	}
}

// conflictTracer counts the statements that failed with a serialization
// failure or a deadlock.
type conflictTracer struct{ serialization, deadlock atomic.Int64 }

func (c *conflictTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *conflictTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	var pe *pgconn.PgError
	if errors.As(d.Err, &pe) {
		switch pe.Code {
		case "40001":
			c.serialization.Add(1)
		case "40P01":
			c.deadlock.Add(1)
		}
	}
}
