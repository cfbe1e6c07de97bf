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
//
// With -workload election the worker is a candidate instead (election.go):
// it campaigns for the role -key with a value naming itself, writes through
// its term's Fence while it leads, stops writing the moment the term's Done
// closes, resigns after a random time up to -term, and campaigns again. Its
// terms are logged as leases are (acquire, lost, release), so the harness
// judges them by the same rules. With -workload observe it follows the
// role's leaders with election.Observe and logs each one it is told of
// (also election.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
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
		workload = flag.String("workload", "lock", "lock (acquire, write, release), election (campaign, write while leading, resign) or observe (follow the leaders)")
		term     = flag.Duration("term", time.Second, "election: upper bound of a term's length before the leader resigns")
		retune   = flag.Float64("retune", 0, "lock workload: while holding, every 1.5×ttl with this probability, refresh the lease to half of -ttl and at once to 3×ttl (a late copy of the short refresh must not cut the long one)")
	)
	flag.Parse()
	w := &worker{url: *url, key: *key, dsn: *dsn, mode: *mode, logPath: *logPath, status: *status, workload: *workload,
		id: *id, ops: *ops, duration: *duration, ttl: *ttl, think: *think, wait: *wait, idle: *idle, term: *term, seed: *seed,
		retune: *retune}
	if err := w.main(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// worker is one worker process: its flags, then what main sets up for the
// workload's loop.
type worker struct {
	url, key, dsn, mode, logPath, status, workload string
	id, ops                                        int
	duration, ttl, think, wait, idle, term         time.Duration
	seed                                           uint64
	retune                                         float64

	rec    *recorder
	locker distlock.Locker
	pool   *pgxpool.Pool
	rng    *rand.Rand
}

func (w *worker) setStatus(s string) { _ = os.WriteFile(w.status, []byte(s), 0o644) }

// nap is one random sleep of the think time: between think/4 and think.
func (w *worker) nap() time.Duration {
	return w.think/4 + time.Duration(w.rng.Int64N(int64(w.think-w.think/4)+1))
}

// rest sleeps d, less once ctx ends: SIGTERM cuts the naps of the
// operation under way short, not the operation (a long -think would
// otherwise keep the harness waiting for seconds at the end of a run).
func rest(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *worker) main() error {
	if w.url == "" || w.key == "" || w.logPath == "" || w.status == "" || (w.dsn == "" && w.workload != "observe") {
		return errors.New("-url, -key, -dsn, -log and -status are required")
	}
	if w.mode != "guarded" && w.mode != "unguarded" {
		return fmt.Errorf("-mode %q: want guarded or unguarded", w.mode)
	}
	if w.workload != "lock" && w.workload != "election" && w.workload != "observe" {
		return fmt.Errorf("-workload %q: want lock, election or observe", w.workload)
	}
	f, err := os.OpenFile(w.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := &recorder{f: f, id: w.id}
	w.rec = rec
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
	ctx, cancel := context.WithTimeout(ctx, w.duration)
	defer cancel()
	stalls := make(chan struct{})
	go func() { defer close(stalls); watchStalls(ctx, rec) }()
	defer func() { <-stalls }()
	defer cancel()

	w.setStatus("free")
	// The library's warnings (a refresh failed, a lease lost) go to stderr,
	// stamped with CLOCK_MONOTONIC like the log, for a post-mortem.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Int64("mono", mono())
			}
			return a
		}}))
	locker, err := distlock.Open(ctx, w.url, distlock.WithTTL(w.ttl), distlock.WithAutoRenew(true), distlock.WithLogger(logger))
	if err != nil {
		return err
	}
	defer locker.Close()
	w.locker = locker
	w.rng = rand.New(rand.NewPCG(w.seed, uint64(w.id)))
	if w.workload == "observe" {
		return w.observe(ctx)
	}
	pool, err := pgxpool.New(ctx, w.dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	w.pool = pool
	var watchers sync.WaitGroup
	defer watchers.Wait()
	if w.workload == "election" {
		return w.election(ctx, &watchers)
	}
	return w.lock(ctx, &watchers)
}

// lock is the lock workload: acquire, read, write counter+1, release.
func (w *worker) lock(ctx context.Context, watchers *sync.WaitGroup) error {
	rec, locker, pool, key, mode := w.rec, w.locker, w.pool, w.key, w.mode
	setStatus, nap := w.setStatus, w.nap
	for n := 0; w.ops == 0 || n < w.ops; n++ {
		if ctx.Err() != nil {
			return nil
		}
		actx, acancel := context.WithTimeout(ctx, w.wait)
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
		rec.log(Event{Ev: "acquire", T0: t0, Epoch: fence.Epoch, Token: tok, Holder: fence.Holder})
		setStatus("held " + strconv.FormatInt(tok, 10))
		watchLoss(watchers, rec, lease)

		// Operations run on a context that SIGTERM does not cut, so a
		// started write always finishes and is logged with its outcome.
		octx, ocancel := context.WithTimeout(context.Background(), 20*time.Second)
		restc := func(d time.Duration) error { w.hold(ctx, octx, lease, d); return nil }
		_ = restc(nap())
		setStatus("db " + strconv.FormatInt(tok, 10))
		wr := Event{Ev: "write", T0: mono(), Epoch: fence.Epoch, Token: tok, Holder: fence.Holder}
		if mode == "guarded" {
			err = fencing.WithGuard(octx, pool, key, fence, func(tx pgx.Tx) error {
				return increment(octx, tx, key, nap(), restc, &wr)
			})
		} else {
			err = increment(octx, pool, key, nap(), restc, &wr)
		}
		judgeWrite(&wr, err, lease)
		rec.log(wr)

		setStatus("free")
		release(octx, rec, lease, lease.Release)
		ocancel()
		if w.idle > 0 {
			rest(ctx, time.Duration(w.rng.Int64N(int64(w.idle)+1)))
		}
	}
	return nil
}

// hold sits on lease for d (less once ctx ends), retuning its TTL every
// 1.5 TTL with -retune's probability: a refresh to half the TTL, then at
// once one to 3×TTL, which is renewed a TTL later. A late copy of the
// short refresh must not cut the long one back (late-request). The
// refreshes' errors are the lease's: a loss shows on Done.
func (w *worker) hold(ctx, octx context.Context, lease *distlock.Lease, d time.Duration) {
	for end := time.Now().Add(d); ; {
		if w.retune > 0 && w.rng.Float64() < w.retune && lease.Err() == nil {
			_ = lease.Refresh(octx, distlock.WithTTL(w.ttl/2))
			_ = lease.Refresh(octx, distlock.WithTTL(3*w.ttl))
		}
		left := time.Until(end)
		if left <= 0 || ctx.Err() != nil {
			return
		}
		rest(ctx, min(left, 3*w.ttl/2))
	}
}

// stallMin is the shortest stall watchStalls logs: five ticks missed.
const stallMin = 50 * time.Millisecond

// watchStalls logs a "stall" for every stretch of stallMin or more in which
// this process ran none of its goroutines (the host overloaded, or a
// SIGSTOP), until ctx ends: a lease lost across such a stretch was lost to
// the host, which the rules tell apart from a backend's fault.
func watchStalls(ctx context.Context, rec *recorder) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := mono()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := mono()
		if time.Duration(now-last) >= stallMin {
			rec.log(Event{Ev: "stall", T0: last, T: now})
		}
		last = now
	}
}

// judgeWrite sets a write's result from its error, and whether lease still
// stood as the result came back: a refusal while the lease still stands is
// a liveness failure, one after it ended is not.
func judgeWrite(wr *Event, err error, lease *distlock.Lease) {
	wr.Valid = history.LeaseValid(lease)
	switch {
	case err == nil:
		wr.Result = "ok"
	case errors.Is(err, fencing.ErrStaleToken):
		wr.Result = "stale"
	default:
		wr.Result, wr.Err = "error", err.Error()
	}
}

// watchLoss logs lease's loss (its Done closed by ErrLeaseLost), with the
// lease's deadline then, from a goroutine counted in watchers.
func watchLoss(watchers *sync.WaitGroup, rec *recorder, lease *distlock.Lease) {
	watchers.Add(1)
	go func() {
		defer watchers.Done()
		<-lease.Done()
		if err := lease.Err(); errors.Is(err, distlock.ErrLeaseLost) {
			rec.log(Event{Ev: "lost", Token: int64(lease.Token()), Result: err.Error(), Exp: monoAt(lease.Expires())})
		}
	}()
}

// release gives lease back with give (Lease.Release, Term.Resign) and logs
// it, with the lease's deadline as it stood when the release began. A
// failed release leaves the lease held (and renewed): it is retried, or a
// lost reply (a server killed mid-call) would strand the lock for good.
func release(ctx context.Context, rec *recorder, lease *distlock.Lease, give func(context.Context) error) {
	t1 := mono()
	exp := monoAt(lease.Expires())
	var err error
	for try := 0; ; try++ {
		err = give(ctx)
		if err == nil || errors.Is(err, distlock.ErrNotHeld) || try == 50 || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rel := Event{Ev: "release", T0: t1, Token: int64(lease.Token()), Exp: exp}
	if err != nil {
		rel.Err = err.Error()
	}
	rec.log(rel)
}

// querier is what a pool and a transaction have in common here.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// increment is the read-modify-write: read, wait (by rest), write read+1.
// An error from rest abandons the write before its UPDATE is sent.
func increment(ctx context.Context, db querier, key string, wait time.Duration, rest func(time.Duration) error, w *Event) error {
	if err := db.QueryRow(ctx, `SELECT n FROM faults_counter WHERE key = $1`, key).Scan(&w.Read); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if err := rest(wait); err != nil {
		return err
	}
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
