package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/postgres"
)

// waitWaiters polls Inspect until Waiters == n.
func waitWaiters(t *testing.T, l distlock.Locker, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := l.Inspect(t.Context(), key)
		if err == nil && h.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Waiters never reached %d: %+v, %v", n, h, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// delayTracer sleeps before the acquire statements while its delay is set:
// a waiter whose client is slow (GC, scheduling, network) for one attempt.
type delayTracer struct{ delay atomic.Int64 }

func (d *delayTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, q pgx.TraceQueryStartData) context.Context {
	if strings.Contains(q.SQL, "INSERT INTO") && strings.Contains(q.SQL, "ON CONFLICT (key) DO UPDATE") {
		if p := time.Duration(d.delay.Load()); p > 0 {
			time.Sleep(p)
		}
	}
	return ctx
}
func (d *delayTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A dead waiter at the head holds the others up about one window (250 ms)
// after a release, not for the rest of the holder's TTL: a release cuts
// every place down to one window.
//
// Schedule: H holds k (TTL 8s). D waits (Locker A), then its Locker is
// closed (Close skips the Dequeue: cleanUp refuses once closed). L waits
// (Locker B). H releases 0.5 s later. L should be granted within ~250 ms.
func TestDeadWaiterHoldsUpOneWindow(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	h := newLocker(t, newPool(t, dsn))
	held, err := h.TryAcquire(ctx, "k", distlock.WithTTL(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dead := newLocker(t, newPool(t, dsn))
	dErr := make(chan error, 1)
	go func() {
		_, err := dead.Acquire(ctx, "k", distlock.WithTTL(time.Minute))
		dErr <- err
	}()
	waitWaiters(t, h, "k", 1)
	_ = dead.Close() // the waiter's process ends
	if err := <-dErr; !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("dead waiter: %v", err)
	}
	live := newLocker(t, newPool(t, dsn))
	got := make(chan time.Time, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		ls, err := live.Acquire(actx, "k", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = ls.Release(ctx)
	}()
	waitWaiters(t, h, "k", 2) // the closed Locker's place still counts
	time.Sleep(500 * time.Millisecond)
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if d := at.Sub(released); at.IsZero() || d > 1500*time.Millisecond {
		t.Fatalf("a place lapses 250 ms after its waiter was told to wait, so a dead waiter holds the others up about that long — broken: "+
			"a waiter whose Locker closed while queued (no Dequeue) held the only live waiter up %v after the holder released "+
			"(holder TTL 8s, released after ~0.6s): the dead place lasts until the holder's original expiry + 250 ms", d.Round(time.Millisecond))
	}
}

// A live waiter keeps its place while the waiter before it holds the key:
// a later arrival does not take the key before it.
//
// Schedule: H holds k (TTL 20s); W2 then W3 queue. W2's client is 100 ms
// slow on its next attempt. H releases: W3 is told W2 comes first; W2
// takes k. 400 ms later W4 arrives and queues behind W2 and W3. W2
// releases; W3's attempt is 200 ms slower than W4's, within its window:
// W3 is granted before W4.
func TestLiveWaiterKeepsItsPlace(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	h := newLocker(t, newPool(t, dsn))
	held, err := h.TryAcquire(ctx, "k", distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who  string
		ls   *distlock.Lease
		err  error
		when time.Time
	}
	grants := make(chan result, 3)
	mk := func(who string, tr *delayTracer) {
		p := onePool(t, dsn, func(c *pgxpool.Config) { c.MaxConns = 4; c.ConnConfig.Tracer = tr })
		l := newLocker(t, p)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			ls, err := l.Acquire(actx, "k", distlock.WithTTL(20*time.Second))
			grants <- result{who, ls, err, time.Now()}
		}()
	}
	trW2, trW3 := &delayTracer{}, &delayTracer{}
	mk("W2", trW2)
	waitWaiters(t, h, "k", 1)
	mk("W3", trW3)
	waitWaiters(t, h, "k", 2)
	trW2.delay.Store(int64(100 * time.Millisecond)) // within its window: it keeps its turn
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-grants
	if first.err != nil || first.who != "W2" {
		t.Fatalf("first grant: %s %v", first.who, first.err)
	}
	trW2.delay.Store(0)
	time.Sleep(400 * time.Millisecond)
	mk("W4", &delayTracer{})
	time.Sleep(300 * time.Millisecond) // W4 queued behind W2
	hi, _ := h.Inspect(ctx, "k")
	trW3.delay.Store(int64(w3Delay))
	if err := first.ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-grants
	if second.err != nil {
		t.Fatal(second.err)
	}
	_ = second.ls.Release(ctx)
	third := <-grants
	if third.ls != nil {
		_ = third.ls.Release(ctx)
	}
	if second.who != "W3" {
		t.Fatalf("waiting Acquires take a key in the order they came — broken: W3 queued before W4 and kept waiting, "+
			"yet after W2's release the key went to %s (then %s); W3's place had lapsed 250 ms after it was told W2 comes first, "+
			"while it waited for W2's release. Inspect during W2's hold: Waiters=%d with 2 Acquires waiting", second.who, third.who, hi.Waiters)
	}
}

// A waiter is woken by NOTIFY on release when the pool sets search_path in
// AfterConnect: the channel is named through the pool, not by the
// listener's own connection (which has no AfterConnect).
func TestListenerHonoursSearchPath(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t) // public.distlock_locks exists
	ctx := t.Context()
	mustExec(t, admin, `CREATE SCHEMA app`)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET search_path TO app`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil { // app.distlock_locks
		t.Fatal(err)
	}
	h, w := newLocker(t, pool), newLocker(t, pool)
	held, err := h.TryAcquire(ctx, "k", distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		ls, err := w.Acquire(actx, "k", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = ls.Release(ctx)
	}()
	waitWaiters(t, h, "k", 1)
	time.Sleep(500 * time.Millisecond)
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if d := at.Sub(released); at.IsZero() || d > 1500*time.Millisecond {
		t.Fatalf("a waiter is woken by NOTIFY on release — broken: with search_path set in the pool's AfterConnect, "+
			"the waiter was granted %v after the release: the LISTEN connection (pool.Config().ConnConfig, no AfterConnect) "+
			"resolved distlock_locks to public.distlock_locks and listens on that oid's channel", d.Round(time.Millisecond))
	}
}

// A waiter on a running Locker is woken by NOTIFY after the lock table was
// dropped and created again: the channel is the table's name, not its oid.
func TestRecreatedTableKeepsNotices(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	pool := newPool(t, dsn)
	h, w := newLocker(t, pool), newLocker(t, pool)
	wait := func(key string) time.Duration {
		held, err := h.TryAcquire(ctx, key, distlock.WithTTL(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			ls, err := w.Acquire(actx, key, distlock.WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			_ = ls.Release(ctx)
		}()
		waitWaiters(t, h, key, 1)
		time.Sleep(300 * time.Millisecond)
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return (<-got).Sub(released)
	}
	if d := wait("a"); d > 1500*time.Millisecond {
		t.Fatalf("before the recreate: %v", d)
	}
	mustExec(t, admin, `DROP TABLE distlock_locks, distlock_locks_waiters`)
	if err := postgres.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if d := wait("b"); d > 1500*time.Millisecond {
		t.Fatalf("a waiter is woken by NOTIFY on release — broken: after the lock table was dropped and recreated "+
			"(Migrate), a waiter on a running Locker was granted %v after the release: its listener still LISTENs on "+
			"distlock:<old oid>, resolved once at connect", d.Round(time.Millisecond))
	}
}

// w3Delay is W3's extra latency at the second hand-off; without it the
// second hand-off is a race between W3 and W4.
var w3Delay = 200 * time.Millisecond
