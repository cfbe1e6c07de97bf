package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/postgres"
)

func rawBackend(t testing.TB, pool *pgxpool.Pool, opts ...distlock.Option) driver.Backend {
	t.Helper()
	b, err := postgres.NewBackend(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func onePool(t testing.TB, dsn string, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	if edit != nil {
		edit(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// An attempt given back without an answer takes nothing when it lands
// late, though other attempts on the key were given back since.
//
// Schedule: attempt A's server process is descheduled (SIGSTOP) with A's
// acquire in its socket; the client times out and gives A back (nil).
// Attempt B runs, its answer is lost, it is given back (nil). A's process
// runs again and executes the buffered acquire: A holds the key, and no
// client knows it, for the whole TTL.
func TestGiveBacksRefuseEveryLateAttempt(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	b := rawBackend(t, newPool(t, dsn), postgres.WithNotify(false))

	poolA := onePool(t, dsn, nil)
	bA := rawBackend(t, poolA, postgres.WithNotify(false))
	var pid int
	if err := poolA.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// pgx prepares a statement on its first use (a round trip of its own):
	// warm the connection's cache so the acquire goes out in one write.
	if _, err := bA.TryLock(ctx, driver.Request{Key: "warm-up", TTL: time.Second, Owner: "warm-up"}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	const key = "refused-slot"
	reqA := driver.Request{Key: key, TTL: time.Minute, Owner: "attempt-A"}
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := bA.TryLock(actx, reqA)
	cancel()
	if err == nil {
		t.Fatal("attempt A answered although its server process is stopped")
	}
	if err := b.Unlock(ctx, driver.Grant{Key: key, Owner: reqA.Owner, TTL: reqA.TTL}); err != nil {
		t.Fatalf("give-back of A: %v", err) // nil: "A can hold nothing any more"
	}

	reqB := driver.Request{Key: key, TTL: time.Minute, Owner: "attempt-B"}
	if _, err := b.TryLock(ctx, reqB); err != nil {
		t.Fatal(err)
	}
	// B's answer is lost: the portable layer gives it back.
	if err := b.Unlock(ctx, driver.Grant{Key: key, Owner: reqB.Owner, TTL: reqB.TTL}); err != nil {
		t.Fatalf("give-back of B: %v", err)
	}

	resume() // A's statement lands late
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		h, err := b.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if h.Held {
			var owner string
			pool := newPool(t, dsn)
			_ = pool.QueryRow(ctx, `SELECT owner FROM distlock_locks WHERE key = $1`, key).Scan(&owner)
			t.Fatalf("a request that lands late takes nothing — broken: attempt A was given back (Unlock returned nil), "+
				"then B's give-back overwrote the single refused slot, and A's late acquire took the key: owner=%q, token %d, held for %v more",
				owner, h.Token, h.TTL.Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Under a database whose default isolation is REPEATABLE READ, an attempt
// that meets a row changed after its snapshot (SQLSTATE 40001) counts as
// finding the key held: waiting Acquires all get the lock in turn.
func TestRepeatableReadDefaultIsolation(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	mustExec(t, admin, `ALTER DATABASE postgres SET default_transaction_isolation TO 'repeatable read'`)
	pool := newPool(t, dsn) // new connections take the database's default
	var iso string
	if err := pool.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&iso); err != nil || iso != "repeatable read" {
		t.Fatalf("isolation %q, %v", iso, err)
	}
	l1, l2 := newLocker(t, pool), newLocker(t, pool)
	var (
		mu   sync.Mutex
		bad  []error
		wg   sync.WaitGroup
		held int
	)
	for i := range 8 {
		l := l1
		if i%2 == 1 {
			l = l2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				ls, err := l.Acquire(actx, "hot", distlock.WithTTL(5*time.Second))
				cancel()
				if err != nil {
					mu.Lock()
					bad = append(bad, err)
					mu.Unlock()
					continue
				}
				mu.Lock()
				held++
				mu.Unlock()
				_ = ls.Release(ctx)
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("contended attempts are refused as held; Acquire waits — broken: %d of 200 Acquire calls failed "+
			"under default_transaction_isolation=repeatable read (%d succeeded), first: %v", len(bad), held, bad[0])
	}
}

// WithLease refuses a pgx.Tx as db (it is a fencing.Beginner): its Begin
// makes a savepoint, and the outer COMMIT, after the lease expired, would
// keep the write.
func TestWithLeaseRefusesATransaction(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	pool := newPool(t, dsn)
	l := newLocker(t, pool)
	lease, err := l.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Rollback(ctx)
	ran := false
	err = postgres.WithLease(ctx, outer, lease, func(pgx.Tx) error { ran = true; return nil })
	if !errors.Is(err, distlock.ErrInvalidOption) || ran {
		t.Fatalf("WithLease inside a transaction: %v (fn ran: %v), want ErrInvalidOption and fn not run", err, ran)
	}
}

// pauseTracer sleeps before the statement that commits: a holder paused
// (GC, scheduling, a slow network) after its work, before its commit.
type pauseTracer struct {
	pause  time.Duration
	before func()
}

func (p *pauseTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasSuffix(strings.ToUpper(strings.TrimSpace(d.SQL)), "COMMIT") {
		time.Sleep(p.pause)
		if p.before != nil {
			p.before()
		}
	}
	return ctx
}

func (p *pauseTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A holder paused before its commit, past its lease, commits nothing: the
// expiry check and COMMIT go out as one string the server runs through.
func TestWithLeasePauseBeforeCommit(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	mustExec(t, admin, `CREATE TABLE data (id int PRIMARY KEY, v text NOT NULL)`, `INSERT INTO data VALUES (1, 'initial')`)
	l := newLocker(t, newPool(t, dsn))
	lease, err := l.TryAcquire(ctx, "job", distlock.WithTTL(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var expiredAtCommit bool
	tr := &pauseTracer{pause: 800 * time.Millisecond, before: func() {
		_ = admin.QueryRow(context.Background(), `SELECT expires_at <= clock_timestamp() FROM distlock_locks WHERE key = 'job'`).Scan(&expiredAtCommit)
	}}
	db := onePool(t, dsn, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr })
	err = postgres.WithLease(ctx, db, lease, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE data SET v = 'after expiry' WHERE id = 1`)
		return err
	})
	if !expiredAtCommit {
		t.Fatal("the lease had not expired when COMMIT was sent; the test did not pause")
	}
	if !errors.Is(err, postgres.ErrLeaseExpired) || dataRow(t, admin) == "after expiry" {
		t.Fatalf("a paused holder whose lease expired must commit nothing: the holder paused 800ms before its commit, "+
			"by when the lease (TTL 400ms) had expired by the database's clock; WithLease returned %v", err)
	}
}

// Lockers that spell one table differently (distlock_locks,
// public.distlock_locks) hear each other's releases: the channel is the
// table's, not its spelling's.
func TestOneTableTwoSpellingsShareNotices(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	pool := newPool(t, dsn)
	a, err := postgres.New(pool, postgres.WithTable("public.distlock_locks"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, pool) // default table: the same one
	la, err := a.TryAcquire(ctx, "k", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("same table, expected held: %v", err)
	}
	got := make(chan time.Time, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		ls, err := b.Acquire(actx, "k", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = ls.Release(ctx)
	}()
	time.Sleep(700 * time.Millisecond) // the waiter subscribes and waits
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	if d := at.Sub(released); d > 1500*time.Millisecond {
		t.Fatalf("waiters are woken by NOTIFY on release — broken: a waiter on distlock_locks was granted %v after "+
			"the release through public.distlock_locks (same table, channels %q vs %q)", d.Round(time.Millisecond),
			"distlock:distlock_locks", "distlock:public.distlock_locks")
	}
}

// Each Refresh in a batch gets the outcome Refresh would have given it,
// also when one grant appears twice (UPDATE ... FROM updates a row once).
func TestRefreshBatchDuplicateGrant(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	b := rawBackend(t, newPool(t, dsn), postgres.WithNotify(false))
	req := driver.Request{Key: "dup", TTL: time.Minute, Owner: "o1"}
	g, err := b.TryLock(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	g.Key, g.Owner, g.TTL = req.Key, req.Owner, req.TTL
	batch := []driver.Refresh{{Grant: g, TTL: time.Minute}, {Grant: g, TTL: time.Minute}}
	if err := b.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Refresh(ctx, g, time.Minute); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	for i, r := range batch {
		if r.Err != nil {
			t.Fatalf("RefreshBatch contract broken (each entry gets Refresh's outcome): entry %d of a batch holding the same "+
				"held grant twice got %v, while Refresh of that grant succeeds", i, r.Err)
		}
	}
}
