package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/postgres"
)

// The three ways an attempt runs the take statement: TryAcquire (no
// waiter), a waiting Acquire's first attempt (waiter = owner, the acquire
// statement) and its later attempts (waiter <> owner, acquireQueue).
var takePaths = []struct {
	name   string
	waiter func(owner string) string
}{
	{"try", func(string) string { return "" }},
	{"first", func(owner string) string { return owner }},
	{"queue", func(owner string) string { return owner + "-w" }},
}

// keyState prepares key k in table tbl: no row, a free row, an expired row.
var keyStates = []struct {
	name    string
	prepare func(ctx context.Context, admin *pgxpool.Pool, tbl, k string) error
}{
	{"absent", func(context.Context, *pgxpool.Pool, string, string) error { return nil }},
	{"free", func(ctx context.Context, admin *pgxpool.Pool, tbl, k string) error {
		_, err := admin.Exec(ctx, `INSERT INTO `+tbl+` (key, token) VALUES ($1, 5)`, k)
		return err
	}},
	{"expired", func(ctx context.Context, admin *pgxpool.Pool, tbl, k string) error {
		_, err := admin.Exec(ctx, `INSERT INTO `+tbl+` (key, owner, token, expires_at)
			VALUES ($1, 'gone', 5, clock_timestamp() - interval '1 second')`, k)
		return err
	}},
}

func heldOrFail(t *testing.T, b driver.Backend, key string, want bool) driver.Holder {
	t.Helper()
	h, err := b.Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if h.Held != want {
		t.Fatalf("%q held = %v, want %v (%+v)", key, h.Held, want, h)
	}
	return h
}

// A copy of an attempt that lands after its give-back takes nothing, on
// every path, whatever the key's row looks like, in a schema-qualified
// table too; and a duplicate of a granted attempt takes nothing more (same
// token, still held).
func TestTakeTurnLateAndDuplicateCopies(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	mustExec(t, admin, `CREATE SCHEMA app`)
	if err := postgres.Migrate(ctx, admin, postgres.WithTable("app.locks")); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"distlock_locks", "app.locks"} {
		b := rawBackend(t, newPool(t, dsn), postgres.WithTable(tbl))
		for _, st := range keyStates {
			for _, p := range takePaths {
				name := fmt.Sprintf("%s/%s/%s", tbl, st.name, p.name)
				t.Run(name, func(t *testing.T) {
					// Late copy of a given-back attempt.
					k := "late/" + name
					if err := st.prepare(ctx, admin, tbl, k); err != nil {
						t.Fatal(err)
					}
					owner := "o-late-" + name
					req := driver.Request{Key: k, TTL: time.Minute, Owner: owner, Waiter: p.waiter(owner)}
					if err := b.Unlock(ctx, driver.Grant{Key: k, Owner: owner}); err != nil {
						t.Fatalf("give back: %v", err)
					}
					if g, err := b.TryLock(ctx, req); !errors.Is(err, distlock.ErrNotAcquired) {
						t.Fatalf("late copy after its give-back: token %d, err %v; want ErrNotAcquired", g.Token, err)
					}
					heldOrFail(t, b, k, false)
					// Someone else takes the key with a higher token.
					other := driver.Request{Key: k, TTL: time.Minute, Owner: "x-" + owner}
					g, err := b.TryLock(ctx, other)
					if err != nil {
						t.Fatalf("after the late copy, TryAcquire: %v", err)
					}
					if g.Token <= 5 {
						t.Fatalf("token %d not above the row's 5", g.Token)
					}

					// Duplicate of a granted attempt.
					k2 := "dup/" + name
					if err := st.prepare(ctx, admin, tbl, k2); err != nil {
						t.Fatal(err)
					}
					owner2 := "o-dup-" + name
					req2 := driver.Request{Key: k2, TTL: time.Minute, Owner: owner2, Waiter: p.waiter(owner2)}
					g1, err := b.TryLock(ctx, req2)
					if err != nil {
						t.Fatalf("first copy: %v", err)
					}
					if g2, err := b.TryLock(ctx, req2); !errors.Is(err, distlock.ErrNotAcquired) {
						t.Fatalf("duplicate copy: token %d, err %v; want ErrNotAcquired", g2.Token, err)
					}
					h := heldOrFail(t, b, k2, true)
					if int64(h.Token) != g1.Token {
						t.Fatalf("duplicate changed the token %d -> %d", g1.Token, h.Token)
					}
				})
			}
		}
	}
}

// Parameter types are inferred in every pgx exec mode, on a key with no
// row and on a queued key, on every path.
func TestTakeTurnExecModes(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	modes := map[string]pgx.QueryExecMode{
		"cache-statement": pgx.QueryExecModeCacheStatement,
		"cache-describe":  pgx.QueryExecModeCacheDescribe,
		"describe-exec":   pgx.QueryExecModeDescribeExec,
		"exec":            pgx.QueryExecModeExec,
		"simple":          pgx.QueryExecModeSimpleProtocol,
	}
	for mname, mode := range modes {
		pool := onePool(t, dsn, func(c *pgxpool.Config) {
			c.MaxConns = 2
			c.ConnConfig.DefaultQueryExecMode = mode
		})
		b := rawBackend(t, pool)
		for _, p := range takePaths {
			k := mname + "/" + p.name
			owner := "o-" + k
			g, err := b.TryLock(ctx, driver.Request{Key: k, TTL: time.Minute, Owner: owner, Value: "v", Waiter: p.waiter(owner)})
			if err != nil {
				t.Fatalf("%s: fresh key: %v", k, err)
			}
			g.Key, g.Owner = k, owner
			// A queued attempt on the held key, then the release and its turn.
			w := "q-" + k
			if _, err := b.TryLock(ctx, driver.Request{Key: k, TTL: time.Minute, Owner: w + "-2", Waiter: w}); !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("%s: queued attempt on a held key: %v", k, err)
			}
			if err := b.Unlock(ctx, g); err != nil {
				t.Fatalf("%s: release: %v", k, err)
			}
			if _, err := b.TryLock(ctx, driver.Request{Key: k, TTL: time.Minute, Owner: w + "-3", Waiter: w}); err != nil {
				t.Fatalf("%s: the only waiter's turn: %v", k, err)
			}
		}
	}
}

// Exclusion and rising tokens under each default isolation, waiters and
// TryAcquire mixed, holders inside WithLease (the row FOR SHARE).
func TestTakeTurnExclusionIsolations(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			dsn, admin := server(t)
			ctx := t.Context()
			mustExec(t, admin, `ALTER DATABASE postgres SET default_transaction_isolation TO '`+iso+`'`,
				`CREATE TABLE data (id int PRIMARY KEY, v text)`, `INSERT INTO data VALUES (1, '')`)
			var (
				mu      sync.Mutex
				inside  int
				last    distlock.Token
				bad     []string
				granted int
				wg      sync.WaitGroup
			)
			for i := range 6 {
				pool := newPool(t, dsn)
				l := newLocker(t, pool)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 12 {
						actx, cancel := context.WithTimeout(ctx, 15*time.Second)
						var ls *distlock.Lease
						var err error
						if i%3 == 0 {
							ls, err = l.TryAcquire(actx, "hot", distlock.WithTTL(5*time.Second))
						} else {
							ls, err = l.Acquire(actx, "hot", distlock.WithTTL(5*time.Second))
						}
						cancel()
						if err != nil {
							if i%3 != 0 {
								mu.Lock()
								bad = append(bad, "Acquire: "+err.Error())
								mu.Unlock()
							} else {
								time.Sleep(5 * time.Millisecond)
							}
							continue
						}
						mu.Lock()
						inside++
						if inside > 1 {
							bad = append(bad, fmt.Sprintf("two holders, token %d", ls.Token()))
						}
						if ls.Token() <= last {
							bad = append(bad, fmt.Sprintf("token %d after %d", ls.Token(), last))
						}
						last = ls.Token()
						granted++
						mu.Unlock()
						err = postgres.WithLease(ctx, pool, ls, func(tx pgx.Tx) error {
							_, err := tx.Exec(ctx, `UPDATE data SET v = $1 WHERE id = 1`, fmt.Sprint(ls.Token()))
							time.Sleep(3 * time.Millisecond)
							return err
						})
						mu.Lock()
						inside--
						if err != nil && !errors.Is(err, distlock.ErrNotHeld) {
							bad = append(bad, "WithLease: "+err.Error())
						}
						mu.Unlock()
						_ = ls.Release(ctx)
					}
				}()
			}
			wg.Wait()
			if len(bad) > 0 {
				t.Fatalf("%s: %d problems (%d grants), first: %s", iso, len(bad), granted, bad[0])
			}
		})
	}
}

// A key with no lock row yet but a live waiter queued: another waiting
// Acquire's first attempt must not jump the queue. (An insert is
// filtered by the turn too, not only the update of an existing row.)
func TestTakeTurnAbsentRowHonoursQueue(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	b := rawBackend(t, newPool(t, dsn))
	mustExec(t, admin, `INSERT INTO distlock_locks_waiters (key, waiter, until)
		VALUES ('norow', 'first', clock_timestamp() + interval '1 minute')`)
	for _, p := range takePaths[1:] {
		owner := "late-" + p.name
		g, err := b.TryLock(ctx, driver.Request{Key: "norow", TTL: time.Minute, Owner: owner, Waiter: p.waiter(owner)})
		if err == nil {
			t.Fatalf("%s: a waiter took a key with no row past the live waiter ahead (token %d)", p.name, g.Token)
		}
		if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	if _, err := b.TryLock(ctx, driver.Request{Key: "norow", TTL: time.Minute, Owner: "first-1", Waiter: "first"}); err != nil {
		t.Fatalf("the first waiter's turn: %v", err)
	}
}

// While a lease-bound transaction holds the row FOR SHARE past the lease's
// expiry, no waiter is granted the key (the first blocks on the row, the
// others may not take their turn past it); once it ends, the waiters are
// granted in the order they came.
func TestTakeTurnWithLeaseHoldsBackWaiters(t *testing.T) {
	t.Parallel()
	dsn, admin := server(t)
	ctx := t.Context()
	pool := newPool(t, dsn)
	holder := newLocker(t, pool)
	held, err := holder.TryAcquire(ctx, "lk", distlock.WithTTL(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	type grant struct {
		i     int
		token distlock.Token
	}
	grants := make(chan grant, n)
	for i := range n {
		l := newLocker(t, newPool(t, dsn))
		go func() {
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			ls, err := l.Acquire(actx, "lk", distlock.WithTTL(time.Minute))
			if err != nil {
				grants <- grant{-1, 0}
				return
			}
			grants <- grant{i, ls.Token()}
			time.Sleep(20 * time.Millisecond)
			_ = ls.Release(ctx)
		}()
		waitWaiters(t, holder, "lk", i+1)
	}
	var during []string
	err = postgres.WithLease(ctx, pool, held, func(pgx.Tx) error {
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
			var owner *string
			var token int64
			if err := admin.QueryRow(ctx, `SELECT owner, token FROM distlock_locks WHERE key = 'lk'`).Scan(&owner, &token); err != nil {
				return err
			}
			if distlock.Token(token) != held.Token() {
				during = append(during, fmt.Sprintf("token %d granted while the lease's transaction ran", token))
			}
		}
		return nil
	})
	if !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("WithLease past the lease's expiry: %v, want ErrNotHeld", err)
	}
	if len(during) > 0 {
		t.Fatal(during[0])
	}
	var last distlock.Token
	for want := range n {
		select {
		case g := <-grants:
			if g.i != want {
				t.Fatalf("after the lease's transaction: grant %d went to %d", want, g.i)
			}
			if g.token <= last || g.token <= held.Token() {
				t.Fatalf("token %d after %d (holder %d)", g.token, last, held.Token())
			}
			last = g.token
		case <-time.After(5 * time.Second):
			t.Fatalf("grant %d: none within 5 s of the lease's transaction", want)
		}
	}
}

// A duplicate of a waiter's granted attempt (same owner, same waiter)
// lands after the grant: it takes no lock, and must not put the holder
// back in the queue, where its place would hold up the waiters behind it
// for a window after the holder's release.
func TestTakeTurnDuplicateLeavesNoPlace(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	b := rawBackend(t, newPool(t, dsn))
	for _, p := range takePaths[1:] {
		k := "dupq/" + p.name
		owner := "o-" + k
		req := driver.Request{Key: k, TTL: time.Minute, Owner: owner, Waiter: p.waiter(owner)}
		if _, err := b.TryLock(ctx, req); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if _, err := b.TryLock(ctx, req); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("%s: duplicate: %v", p.name, err)
		}
		if h := heldOrFail(t, b, k, true); h.Waiters != 0 {
			t.Errorf("%s: after a duplicate of the granted attempt the holder waits in its own queue: Waiters = %d", p.name, h.Waiters)
		}
	}
}

// Keys with no row yet, each wanted at once by several waiting Acquires
// (the row's insert races, and a statement's snapshot may not show the
// winner's row): every Acquire is granted, one holder at a time, tokens
// rising per key.
func TestTakeTurnFreshKeysRace(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{"read committed", "repeatable read"} {
		t.Run(iso, func(t *testing.T) {
			dsn, admin := server(t)
			ctx := t.Context()
			mustExec(t, admin, `ALTER DATABASE postgres SET default_transaction_isolation TO '`+iso+`'`)
			const keys, per = 12, 4
			lockers := make([]distlock.Locker, per)
			for i := range lockers {
				lockers[i] = newLocker(t, newPool(t, dsn))
			}
			var (
				mu     sync.Mutex
				inside = map[string]int{}
				last   = map[string]distlock.Token{}
				bad    []string
				wg     sync.WaitGroup
			)
			start := make(chan struct{})
			for k := range keys {
				key := fmt.Sprintf("fresh-%d", k)
				for i := range per {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						actx, cancel := context.WithTimeout(ctx, 15*time.Second)
						defer cancel()
						ls, err := lockers[i].Acquire(actx, key, distlock.WithTTL(10*time.Second))
						mu.Lock()
						if err != nil {
							bad = append(bad, key+": "+err.Error())
							mu.Unlock()
							return
						}
						inside[key]++
						if inside[key] > 1 {
							bad = append(bad, key+": two holders")
						}
						if ls.Token() <= last[key] {
							bad = append(bad, fmt.Sprintf("%s: token %d after %d", key, ls.Token(), last[key]))
						}
						last[key] = ls.Token()
						mu.Unlock()
						time.Sleep(10 * time.Millisecond)
						mu.Lock()
						inside[key]--
						mu.Unlock()
						_ = ls.Release(ctx)
					}()
				}
			}
			close(start)
			wg.Wait()
			if len(bad) > 0 {
				t.Fatalf("%d problems, first: %s", len(bad), bad[0])
			}
		})
	}
}
