package postgres_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// First-come order under REPEATABLE READ default isolation.
func TestFirstComeOrderRepeatableRead(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	mustExec(t, admin, `ALTER DATABASE postgres SET default_transaction_isolation TO 'repeatable read'`)
	pool := newPool(t, dsn)
	holder := newLocker(t, pool)
	held, err := holder.TryAcquire(ctx, "fifo", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	for i := range n {
		l := newLocker(t, newPool(t, dsn))
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
			t.Fatalf("FIFO under repeatable read: grant %d went to %d", want, got)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("FIFO under repeatable read: hand-offs took %v", d)
	}
}
