package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all" // every backend's URL scheme: mem, redis, redlock, etcd, zk
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/fencing"
)

func main() {
	// SIGTERM too: it is how a service manager or Kubernetes stops a worker.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is what the flags and environment set.
type config struct {
	dsn, lockURL, role, value string
	every, ttl, runFor        time.Duration
	instances, maxRuns        int
	observe                   bool
}

// noDSN is the message when no PostgreSQL is named.
const noDSN = `no PostgreSQL given: pass -dsn or set DATABASE_URL (or only watch, with -observe), e.g.
  -dsn 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
To start a scratch PostgreSQL for it (see examples/leader/README.md):
  docker run --rm -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres`

// cli parses args and the environment, runs the instances until ctx ends
// (or -for passes) and returns the exit code: 0 when stopped (or -h), 1 on
// failure, 2 on bad usage.
func cli(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leader", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.lockURL, "url", "", "lock backend URL, e.g. redis://127.0.0.1:6379, etcd://127.0.0.1:2379, zk://127.0.0.1:2181/locks;\n"+
		"empty: $DISTLOCK_URL, else mem:// (in-process: only the -instances of this one process share it)")
	fs.StringVar(&cfg.dsn, "dsn", "", "PostgreSQL connection URL; empty: $DATABASE_URL (not needed with -observe)")
	fs.StringVar(&cfg.role, "role", "leader-demo", "the role to campaign for (a lock key)")
	fs.StringVar(&cfg.value, "value", "", "what observers see of this instance; empty: host:pid")
	fs.DurationVar(&cfg.every, "every", time.Second, "the job's period")
	fs.DurationVar(&cfg.ttl, "ttl", 5*time.Second, "lease TTL of a term: how long a leader that died blocks the role\n(ZooKeeper: the session timeout instead, ?session_timeout= in the URL)")
	fs.IntVar(&cfg.instances, "instances", 1, "instances in this process, each with its own Locker")
	fs.IntVar(&cfg.maxRuns, "max-runs", 0, "a leader resigns after this many runs, to show a hand-over; 0: never")
	fs.DurationVar(&cfg.runFor, "for", 0, "stop after this long; 0: until interrupted")
	fs.BoolVar(&cfg.observe, "observe", false, "only print the leader as it changes; campaign for nothing")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h: the usage is printed
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "leader: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if cfg.dsn == "" {
		cfg.dsn = getenv("DATABASE_URL")
	}
	if cfg.lockURL == "" {
		cfg.lockURL = getenv("DISTLOCK_URL")
	}
	if cfg.lockURL == "" {
		cfg.lockURL = "mem://"
	}
	if cfg.value == "" {
		host, _ := os.Hostname()
		cfg.value = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintf(stderr, "leader: %v\n", err)
		return 2
	}
	if cfg.runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.runFor)
		defer cancel()
	}
	if err := run(ctx, cfg, &lines{w: stdout}); err != nil {
		fmt.Fprintf(stderr, "leader: %v\n", err)
		return 1
	}
	return 0
}

// check reports a flag out of range.
func (c *config) check() error {
	switch {
	case distlock.ValidateKey(c.role) != nil:
		return fmt.Errorf("-role: %w", distlock.ValidateKey(c.role))
	case len(c.value) > distlock.MaxValueLen-8: // room for the /N of -instances
		return fmt.Errorf("-value: %d bytes, want at most %d", len(c.value), distlock.MaxValueLen-8)
	case c.every < 10*time.Millisecond || c.every > time.Hour:
		return fmt.Errorf("-every %v: want between 10ms and 1h", c.every)
	case c.ttl <= 0 || c.ttl > distlock.MaxTTL:
		return fmt.Errorf("-ttl %v: want between 0 and %v", c.ttl, distlock.MaxTTL)
	case c.instances < 1 || c.instances > 100:
		return fmt.Errorf("-instances %d: want between 1 and 100", c.instances)
	case c.maxRuns < 0 || c.runFor < 0:
		return errors.New("-max-runs and -for must not be negative")
	case c.dsn == "" && !c.observe:
		return errors.New(noDSN)
	}
	return nil
}

// createRuns is the job's table: one row per run, with the term that wrote it.
const createRuns = `CREATE TABLE IF NOT EXISTS leader_demo_runs (
	id     bigserial   PRIMARY KEY,
	role   text        NOT NULL,
	token  bigint      NOT NULL,
	holder text        NOT NULL,
	leader text        NOT NULL,
	at     timestamptz NOT NULL DEFAULT now()
)`

// run opens the database and one Locker per instance, and runs the
// instances and an observer until ctx ends or one of them fails.
func run(ctx context.Context, cfg config, out *lines) error {
	var pool *pgxpool.Pool
	if !cfg.observe {
		var err error
		if pool, err = openDB(ctx, cfg.dsn, cfg.ttl); err != nil {
			return err
		}
		defer pool.Close()
	}
	n := cfg.instances
	if cfg.observe {
		n = 1
	}
	lockers := make([]distlock.Locker, n)
	for i := range lockers {
		l, err := distlock.Open(ctx, cfg.lockURL)
		if err != nil {
			return err
		}
		defer l.Close() // after the instances have resigned; it releases anything left
		lockers[i] = l
	}
	g := lockers[0].Guarantees()
	out.printf("backend %s (%s), role %q", cfg.lockURL, g.Backend, cfg.role)
	if g.SingleProcess && !cfg.observe {
		if cfg.instances == 1 {
			out.printf("note: %s is in-process: instances in other processes do not see this one (use -instances or a server URL)", g.Backend)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			cancel() // one instance failing stops them all
		}
	}
	wg.Go(func() { fail(observe(ctx, lockers[0], cfg.role, out)) })
	for i, l := range lockers {
		if cfg.observe {
			break
		}
		el, err := election.New(l, cfg.role)
		if err != nil {
			fail(err)
			break
		}
		w := &worker{cfg: &cfg, el: el, pool: pool, value: cfg.value, out: out}
		if cfg.instances > 1 {
			w.value = fmt.Sprintf("%s/%d", cfg.value, i)
		}
		wg.Go(func() { fail(w.serve(ctx)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// openDB connects to PostgreSQL and creates the tables if missing.
func openDB(ctx context.Context, dsn string, ttl time.Duration) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad -dsn: %w", err)
	}
	// A leader paused in the middle of a transaction holds the fence row's
	// lock, which would block the next leader's guarded writes until the
	// paused one wakes; the server ends such a transaction after the TTL.
	pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(ttl.Milliseconds())
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	err = pool.Ping(ctx)
	if err == nil {
		err = fencing.Migrate(ctx, pool) // the fence table
	}
	if err == nil {
		// CREATE TABLE IF NOT EXISTS may fail when instances starting
		// together run it at once; the lock makes them take turns.
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('leader_demo_runs'))`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, createRuns)
			return err
		})
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	return pool, nil
}

// observe prints every new leader of role until ctx ends.
func observe(ctx context.Context, l distlock.Locker, role string, out *lines) error {
	el, err := election.New(l, role)
	if err != nil {
		return err
	}
	leaders, err := el.Observe(ctx)
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	for ld := range leaders { // closed when ctx ends
		out.printf("observer: leader is %s (term %d)", ld.Value, ld.Token)
	}
	return nil
}

// worker is one instance: it campaigns, leads, and campaigns again.
type worker struct {
	cfg   *config
	el    *election.Election
	pool  *pgxpool.Pool
	value string
	out   *lines
}

// serve campaigns until ctx ends, leading whenever elected.
func (w *worker) serve(ctx context.Context) error {
	for {
		w.out.printf("%s: campaigning", w.value)
		term, err := w.el.Campaign(ctx, w.value, distlock.WithTTL(w.cfg.ttl))
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, distlock.ErrInvalid):
			return fmt.Errorf("%s: campaign: %w", w.value, err)
		case err != nil: // the backend unreachable: try again
			w.out.printf("%s: campaign failed: %v", w.value, err)
			if sleep(ctx, time.Second) != nil {
				return nil
			}
			continue
		}
		w.out.printf("%s: elected, term %d", w.value, term.Token())
		if w.lead(ctx, term) && sleep(ctx, w.cfg.every) != nil {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// lead runs the job every period while term lasts, stopping it the moment
// the term ends. It resigns when ctx ends, when the database refuses the
// term's fence, and after -max-runs runs; after those runs it returns true:
// the instance stands aside for a period before campaigning again.
func (w *worker) lead(ctx context.Context, term *election.Term) (stepAside bool) {
	job, stop := termContext(ctx, term)
	defer stop()
	tick := time.NewTicker(w.cfg.every)
	defer tick.Stop()
	for runs := 0; job.Err() == nil; {
		id, err := write(job, w.pool, w.cfg.role, term.Fence(), w.value)
		switch {
		case err == nil:
			runs++
			w.out.printf("%s: run %d written in term %d", w.value, id, term.Token())
		case errors.Is(err, fencing.ErrStaleToken):
			// A later term has written: this one is over, whatever the
			// lease says (a pause outlasted it, or a backend lost the lock).
			w.out.printf("%s: write REFUSED, term %d is stale: %v", w.value, term.Token(), err)
			w.resign(term, "stale")
			return false
		case job.Err() != nil: // the term or the program ended mid-write: rolled back
		default:
			w.out.printf("%s: run failed: %v", w.value, err)
		}
		if w.cfg.maxRuns > 0 && runs >= w.cfg.maxRuns && job.Err() == nil {
			w.resign(term, fmt.Sprintf("after %d runs", runs))
			return true
		}
		select {
		case <-tick.C:
		case <-job.Done():
		}
	}
	if ctx.Err() != nil {
		w.resign(term, "shutting down")
		return false
	}
	w.out.printf("%s: term %d ended, job stopped: %v", w.value, term.Token(), term.Err())
	return false
}

// resign gives term up so another instance is elected at once.
func (w *worker) resign(term *election.Term, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch err := term.Resign(ctx); {
	case err == nil:
		w.out.printf("%s: resigned term %d (%s)", w.value, term.Token(), why)
	case errors.Is(err, distlock.ErrNotHeld):
		w.out.printf("%s: term %d had ended: %v", w.value, term.Token(), term.Err())
	default: // it ends at its TTL
		w.out.printf("%s: resign term %d: %v", w.value, term.Token(), err)
	}
}

// termContext returns a context that ends with ctx or the moment term
// does, whichever comes first; stop releases it.
func termContext(ctx context.Context, term *election.Term) (job context.Context, stop func()) {
	job, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-term.Done():
			cancel(fmt.Errorf("term %d ended: %w", term.Token(), term.Err()))
		case <-job.Done():
		}
	}()
	return job, func() { cancel(context.Canceled) }
}

// write is the job: one row, in a transaction the fence lets commit only if
// no later term has written to role. It returns the row's id.
func write(ctx context.Context, db fencing.Beginner, role string, f distlock.Fence, leader string) (id int64, err error) {
	err = fencing.WithGuard(ctx, db, role, f, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO leader_demo_runs (role, token, holder, leader) VALUES ($1, $2, $3, $4) RETURNING id`,
			role, int64(f.Token), f.Holder, leader).Scan(&id)
	})
	return id, err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lines writes whole lines, stamped with the time, from many goroutines.
type lines struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lines) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
}
