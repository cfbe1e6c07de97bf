// Command worker is the lock holder of the fault harness (package faults).
// The harness builds it and runs several copies, each its own process, so
// that pausing one with SIGSTOP also pauses its lease renewal, as a long GC
// pause would.
//
// Each worker repeatedly acquires -key on the backend named by -url (any
// distlock.Open URL), reads a counter row in PostgreSQL, sleeps a short
// random time, writes counter+1 and releases. With -mode=guarded the read
// and the write run in one transaction that starts with fencing.Guard,
// given the lease's Fence (token and holder id); with -mode=unguarded they
// are a plain SELECT and UPDATE, and nothing checks the lease before the
// write (the naive client the fence exists for).
//
// Every event is appended to -log as one JSON line stamped with
// CLOCK_MONOTONIC, which all processes on one machine share (Go's own
// monotonic reading is per process). -status holds "held TOKEN" from the
// acquire until the database work starts, "db TOKEN" until the release, and
// "free" otherwise, so the harness can find the holder.
// SIGTERM makes the worker finish its current operation, its naps cut
// short, and exit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all"
	"github.com/distlock/distlock/cmd/internal/faults/history"
	"github.com/distlock/distlock/fencing"
)

// Event is one line of the worker's log (see package history).
type Event = history.Event

func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot happen on Linux
	}
	return ts.Nano()
}

// monoAt converts a deadline to CLOCK_MONOTONIC.
func monoAt(t time.Time) int64 { return mono() + int64(time.Until(t)) }

type recorder struct {
	mu sync.Mutex
	f  *os.File
	id int
}

// log appends e as one write(2) so that a kill -9 loses at most the line
// being written, never corrupts an earlier one.
func (r *recorder) log(e Event) {
	if e.T == 0 {
		e.T = mono()
	}
	e.Worker = r.id
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.f.Write(b)
}

func main() {
	var (
		url      = flag.String("url", os.Getenv("FAULTS_URL"), "distlock.Open URL of the lock backend")
		key      = flag.String("key", os.Getenv("FAULTS_KEY"), "lock key, also the counter row and the fence resource")
		dsn      = flag.String("dsn", os.Getenv("FAULTS_DSN"), "PostgreSQL DSN")
		mode     = flag.String("mode", "guarded", "guarded or unguarded")
		logPath  = flag.String("log", "", "event log (JSON lines)")
		status   = flag.String("status", "", "status file")
		id       = flag.Int("id", 0, "worker id")
		ops      = flag.Int("ops", 0, "stop after this many acquires (0: until SIGTERM or -duration)")
		duration = flag.Duration("duration", time.Minute, "stop after this long")
		ttl      = flag.Duration("ttl", time.Second, "lease TTL")
		think    = flag.Duration("think", 40*time.Millisecond, "upper bound of each random sleep (after acquire, between read and write)")
		seed     = flag.Uint64("seed", 1, "random seed")
		wait     = flag.Duration("wait", 10*time.Second, "bound of each Acquire")
		idle     = flag.Duration("idle", 0, "upper bound of a random sleep after each release (0: none), so the key is free at times")
	)
	flag.Parse()
	if err := run(*url, *key, *dsn, *mode, *logPath, *status, *id, *ops, *duration, *ttl, *think, *wait, *idle, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(url, key, dsn, mode, logPath, status string, id, ops int, duration, ttl, think, wait, idle time.Duration, seed uint64) error {
	if url == "" || key == "" || dsn == "" || logPath == "" || status == "" {
		return errors.New("-url, -key, -dsn, -log and -status are required")
	}
	if mode != "guarded" && mode != "unguarded" {
		return fmt.Errorf("-mode %q: want guarded or unguarded", mode)
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := &recorder{f: f, id: id}
	rec.log(Event{Ev: "start", PID: os.Getpid()})
	defer rec.log(Event{Ev: "exit"})

	// SIGCONT is logged so the resume can be matched with the lease's end.
	conts := make(chan os.Signal, 4)
	signal.Notify(conts, syscall.SIGCONT)
	go func() {
		for range conts {
			rec.log(Event{Ev: "cont"})
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()

	setStatus := func(s string) { _ = os.WriteFile(status, []byte(s), 0o644) }
	setStatus("free")

	locker, err := distlock.Open(ctx, url, distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	if err != nil {
		return err
	}
	defer locker.Close()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()

	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	nap := func() time.Duration { return think/4 + time.Duration(rng.Int64N(int64(think-think/4)+1)) }
	// rest sleeps d, less once told to stop: SIGTERM cuts the naps of the
	// operation under way short, not the operation (a long -think would
	// otherwise keep the harness waiting for seconds at the end of a run).
	rest := func(d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	var watchers sync.WaitGroup
	defer watchers.Wait()

	for n := 0; ops == 0 || n < ops; n++ {
		if ctx.Err() != nil {
			return nil
		}
		actx, acancel := context.WithTimeout(ctx, wait)
		t0 := mono()
		lease, err := locker.Acquire(actx, key)
		acancel()
		if err != nil {
			if ctx.Err() != nil {
				// The attempt was waiting until told to stop.
				rec.log(Event{Ev: "stopped", T0: t0})
				return nil
			}
			rec.log(Event{Ev: "error", T0: t0, Err: "acquire: " + err.Error()})
			time.Sleep(50 * time.Millisecond)
			continue
		}
		tok, fence := int64(lease.Token()), lease.Fence()
		rec.log(Event{Ev: "acquire", T0: t0, Token: tok, Holder: fence.Holder})
		setStatus("held " + strconv.FormatInt(tok, 10))
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			<-lease.Done()
			if err := lease.Err(); errors.Is(err, distlock.ErrLeaseLost) {
				rec.log(Event{Ev: "lost", Token: tok, Result: err.Error(), Exp: monoAt(lease.Expires())})
			}
		}()

		// Operations run on a context that SIGTERM does not cut, so a
		// started write always finishes and is logged with its outcome.
		octx, ocancel := context.WithTimeout(context.Background(), 20*time.Second)
		rest(nap())
		setStatus("db " + strconv.FormatInt(tok, 10))
		w := Event{Ev: "write", T0: mono(), Token: tok, Holder: fence.Holder}
		if mode == "guarded" {
			err = fencing.WithGuard(octx, pool, key, fence, func(tx pgx.Tx) error {
				return increment(octx, tx, key, nap(), rest, &w)
			})
		} else {
			err = increment(octx, pool, key, nap(), rest, &w)
		}
		// Judged as the result comes back: a refusal while the lease still
		// stands is a liveness failure, one after it ended is not.
		w.Valid = history.LeaseValid(lease)
		switch {
		case err == nil:
			w.Result = "ok"
		case errors.Is(err, fencing.ErrStaleToken):
			w.Result = "stale"
		default:
			w.Result, w.Err = "error", err.Error()
		}
		rec.log(w)

		t1 := mono()
		exp := monoAt(lease.Expires())
		setStatus("free")
		// A failed Release leaves the lease held (and renewed): retry, or a
		// lost reply (a server killed mid-call) strands the lock for good.
		for try := 0; ; try++ {
			err = lease.Release(octx)
			if err == nil || errors.Is(err, distlock.ErrNotHeld) || try == 50 || octx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		ocancel()
		rel := Event{Ev: "release", T0: t1, Token: tok, Exp: exp}
		if err != nil {
			rel.Err = err.Error()
		}
		rec.log(rel)
		if idle > 0 {
			rest(time.Duration(rng.Int64N(int64(idle) + 1)))
		}
	}
	return nil
}

// querier is what a pool and a transaction have in common here.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// increment is the read-modify-write: read, wait (by rest), write read+1.
func increment(ctx context.Context, db querier, key string, wait time.Duration, rest func(time.Duration), w *Event) error {
	if err := db.QueryRow(ctx, `SELECT n FROM faults_counter WHERE key = $1`, key).Scan(&w.Read); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	rest(wait)
	w.Value = w.Read + 1
	w.TW = mono()
	tag, err := db.Exec(ctx, `UPDATE faults_counter SET n = $2 WHERE key = $1`, key, w.Value)
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("write: %d rows updated", tag.RowsAffected())
	}
	return nil
}
