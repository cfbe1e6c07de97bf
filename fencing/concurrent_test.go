package fencing_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/memory"
)

// testConcurrentCounter runs many holders with ever larger tokens at once —
// what happens when locks change hands while old holders still run. Each
// does a read-modify-write of a counter inside WithGuard, pausing between
// read and write. The guard must serialise them: the counter must equal the
// number of commits, whatever got rejected.
func testConcurrentCounter(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	const r = "counter"
	mustExec(t, pool, `INSERT INTO data (resource, value, n) VALUES ($1, '', 0)`, r)
	const workers, rounds = 12, 15
	accepted, stale, last := contend(t, workers, rounds, func(token distlock.Token) error {
		return fencing.WithGuard(ctx, pool, r, fence(token), func(tx pgx.Tx) error {
			var n int64
			if err := tx.QueryRow(ctx, `SELECT n FROM data WHERE resource = $1`, r).Scan(&n); err != nil {
				return err
			}
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			_, err := tx.Exec(ctx, `UPDATE data SET n = $2 WHERE resource = $1`, r, n+1)
			return err
		})
	})
	var n int64
	if err := pool.QueryRow(ctx, `SELECT n FROM data WHERE resource = $1`, r).Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits, %d stale rejections, counter %d", accepted, stale, n)
	if accepted+stale != workers*rounds {
		t.Fatalf("%d + %d outcomes, want %d", accepted, stale, workers*rounds)
	}
	if accepted == 0 {
		t.Fatal("no transaction committed")
	}
	if n != accepted {
		t.Fatalf("counter = %d but %d transactions committed: lost updates", n, accepted)
	}
	if got := stored(t, pool, r); got > last || got <= 0 {
		t.Fatalf("fence = %d, outside the tokens handed out (1..%d)", got, last)
	}
}

// contend has workers goroutines make rounds attempts each, every attempt
// with the next token from one counter, and counts the attempts that
// committed and those refused with ErrStaleToken; any other error fails the
// test. last is the last token handed out.
func contend(t *testing.T, workers, rounds int, attempt func(distlock.Token) error) (accepted, stale int64, last distlock.Token) {
	t.Helper()
	var next, acc, st atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range rounds {
				err := attempt(distlock.Token(next.Add(1)))
				switch {
				case err == nil:
					acc.Add(1)
				case errors.Is(err, fencing.ErrStaleToken):
					st.Add(1)
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return acc.Load(), st.Load(), distlock.Token(next.Load())
}

// testMemoryLockPause is the story the guard exists for, with a real lock:
// A's lease runs out while A is paused, B takes the lock and writes, then A
// wakes and writes. A's write must be refused and the data must show B's.
func testMemoryLockPause(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memory.NewStore()
	clientA, err := memory.New(memory.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	defer clientA.Close()
	clientB, err := memory.New(memory.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	defer clientB.Close()

	const key = "memory-pause"
	a, err := clientA.TryAcquire(ctx, key, distlock.WithTTL(200*time.Millisecond)) // no auto-renew
	if err != nil {
		t.Fatal(err)
	}
	// A "pauses" until its lease is gone; nothing in A notices.
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("A's lease never expired")
	}
	b, err := clientB.Acquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	if err := write(ctx, pool, key, b.Fence(), "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// A wakes and writes with the token it still has.
	wantStale(t, write(ctx, pool, key, a.Fence(), "A"), a.Token(), b.Token())
	if got := value(t, pool, key); got != "B" {
		t.Fatalf("data = %q, want B's write only", got)
	}

	// Control: the same late write without the guard lands, so the
	// scenario above is a real hazard and not a no-op.
	mustExec(t, pool, `UPDATE data SET value = 'A' WHERE resource = $1`, key)
	if got := value(t, pool, key); got != "A" {
		t.Fatalf("unguarded control: data = %q, want A's stale overwrite", got)
	}
}

// testTimeline replays the package doc's timeline with the row form: a fence
// checked only at write time loses A's update; claiming the fence before
// reading does not.
func testTimeline(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, fence bigint NOT NULL DEFAULT 0, fence_holder text)`)
	row := func(id int, set ...fencing.Column) fencing.RowUpdate {
		return fencing.RowUpdate{Table: pgx.Identifier{"accounts"}, Fence: "fence", Holder: "fence_holder",
			Key: []fencing.Column{{Name: "id", Value: id}}, Set: set}
	}
	balance := func(id int) int64 {
		var b int64
		if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, id).Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	const a, b = distlock.Token(33), distlock.Token(34)

	// Fence at write time only: both writes pass, A's +10 is lost.
	mustExec(t, pool, `INSERT INTO accounts VALUES (1, 100, 32)`)
	readByB := balance(1)
	if err := fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: balance(1) + 10}), fence(a)); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	if err := fencing.UpdateRow(ctx, pool, row(1, fencing.Column{Name: "balance", Value: readByB + 50}), fence(b)); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if got := balance(1); got != 150 {
		t.Fatalf("late-check balance = %d; the doc's timeline says 150 (A's +10 lost)", got)
	}

	// Fence first: B claims right after acquiring, then reads; A is refused.
	mustExec(t, pool, `INSERT INTO accounts VALUES (2, 100, 32)`)
	if err := fencing.UpdateRow(ctx, pool, row(2), fence(b)); err != nil {
		t.Fatalf("B's claim: %v", err)
	}
	readByB = balance(2)
	wantStale(t, fencing.UpdateRow(ctx, pool, row(2, fencing.Column{Name: "balance", Value: balance(2) + 10}), fence(a)), a, b)
	if err := fencing.UpdateRow(ctx, pool, row(2, fencing.Column{Name: "balance", Value: readByB + 50}), fence(b)); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if got := balance(2); got != 150 {
		t.Fatalf("fence-first balance = %d, want 150", got)
	}
}
