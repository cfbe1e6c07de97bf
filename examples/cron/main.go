package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp): // -h: the usage is printed
	case errors.Is(err, errUsage): // the flag package printed what is wrong
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "cron:", err)
		os.Exit(1)
	}
}

// errUsage is a flag error, printed with the usage by the flag package.
var errUsage = errors.New("bad usage")

// lockURL is the backend URL: the -url flag, else $DISTLOCK_URL, else mem://.
func lockURL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv("DISTLOCK_URL"); v != "" {
		return v
	}
	return "mem://"
}

// urlUsage is the -url flag's help.
const urlUsage = "backend URL, e.g. redis://127.0.0.1:6379, etcd://127.0.0.1:2379, zk://127.0.0.1:2181/locks;\n" +
	"empty: $DISTLOCK_URL, else mem:// (in-process: fine for this demo, whose replicas share one process;\n" +
	"across processes it excludes nothing)"

// errLate is a replica declining a slot whose start window has passed.
var errLate = errors.New("slot's start window has passed")

type config struct {
	url      string
	replicas int
	ticks    int
	every    time.Duration
	job      time.Duration
	ttl      time.Duration
}

// run parses args, writes the story to out and flag errors and the usage
// to errOut.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("cron", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var c config
	fs.StringVar(&c.url, "url", "", urlUsage)
	fs.IntVar(&c.replicas, "replicas", 3, "replicas, each with its own Locker")
	fs.IntVar(&c.ticks, "ticks", 5, "schedule slots to run")
	fs.DurationVar(&c.every, "every", 200*time.Millisecond, "schedule period (slot length)")
	fs.DurationVar(&c.job, "job", 0, "how long the job runs (default a quarter of -every)")
	fs.DurationVar(&c.ttl, "ttl", 0, "lease TTL, the failover time if a runner dies (default -every)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.url = lockURL(c.url)
	if c.job == 0 {
		c.job = c.every / 4
	}
	if c.ttl == 0 {
		c.ttl = c.every
	}
	switch {
	case c.replicas < 1 || c.ticks < 1:
		return errors.New("-replicas and -ticks must be at least 1")
	case c.every < 20*time.Millisecond:
		return errors.New("-every must be at least 20ms")
	case c.job < 0 || c.job >= c.every/2:
		return errors.New("-job must be shorter than half of -every")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(c.ticks+1)*c.every+time.Minute)
	defer cancel()

	lockers := make([]distlock.Locker, c.replicas)
	for r := range lockers {
		l, err := distlock.Open(ctx, c.url, distlock.WithTTL(c.ttl))
		if err != nil {
			return err
		}
		defer l.Close()
		lockers[r] = l
	}
	g := lockers[0].Guarantees()
	fmt.Fprintf(out, "backend: %s (%s; token from %s)\n", c.url, g.Backend, g.TokenSource)
	if g.SingleProcess {
		fmt.Fprintln(out, "note: this backend coordinates goroutines of one process only; replicas on several hosts need a shared server URL")
	}

	// Slots are aligned to the period, as a cron schedule is, starting at
	// the next boundary.
	first := time.Now().Truncate(c.every).Add(c.every)
	rec := &ledger{out: out, first: first, every: c.every, runs: make([][]slotRun, c.ticks)}
	errs := make(chan error, c.replicas)
	var wg sync.WaitGroup
	for r, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- replica(ctx, r, l, &c, first, rec)
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	return rec.verify()
}

// replica is one replica's scheduler loop.
func replica(ctx context.Context, r int, l distlock.Locker, c *config, first time.Time, rec *ledger) error {
	for i := range c.ticks {
		slot := first.Add(time.Duration(i) * c.every)
		// Replicas do not wake in step; nor would separate hosts.
		if err := sleepUntil(ctx, slot.Add(rand.N(c.every/10))); err != nil {
			return err
		}
		startBy, end := slot.Add(c.every*3/4), slot.Add(c.every)
		if time.Now().After(startBy) {
			continue // overslept this slot; the next one is ours to try
		}
		key := "cron:report:" + slot.UTC().Format("2006-01-02T15:04:05.000Z")
		sctx, cancel := context.WithDeadline(ctx, end)
		err := l.Do(sctx, key, func(ctx context.Context, lease *distlock.Lease) error {
			if time.Now().After(startBy) {
				return errLate
			}
			rec.ran(i, r, lease.Token())
			if err := job(ctx, c.job); err != nil {
				return err // the lease was lost: Do reports it
			}
			<-ctx.Done() // hold the slot's key until the slot ends
			return nil
		})
		cancel()
		switch {
		case err == nil, errors.Is(err, errLate):
		case errors.Is(err, distlock.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded):
			// Another replica had the slot until it ended.
		case errors.Is(err, distlock.ErrLeaseLost):
			// Do cancelled the job; a standby may take the slot over.
			rec.printf("slot %d: replica %d lost its lease: %v\n", i, r, err)
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return fmt.Errorf("replica %d, slot %d: %w", r, i, err)
		}
	}
	return nil
}

// job stands for the real work; it stops when ctx ends, which Do does the
// moment the lease is lost.
func job(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func sleepUntil(ctx context.Context, at time.Time) error {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type slotRun struct {
	replica int
	token   distlock.Token
}

// ledger records who ran each slot, to check the result. In a real
// deployment this is a table written with the fencing token.
type ledger struct {
	out   io.Writer
	first time.Time
	every time.Duration

	mu   sync.Mutex
	runs [][]slotRun
}

func (g *ledger) ran(slot, replica int, token distlock.Token) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.runs[slot] = append(g.runs[slot], slotRun{replica, token})
	at := g.first.Add(time.Duration(slot) * g.every)
	fmt.Fprintf(g.out, "slot %d (%s): replica %d runs the job with token %d\n", slot, at.Format("15:04:05.000"), replica, token)
}

func (g *ledger) printf(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fmt.Fprintf(g.out, format, args...)
}

func (g *ledger) verify() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var bad []string
	for i, runs := range g.runs {
		if len(runs) != 1 {
			bad = append(bad, fmt.Sprintf("slot %d ran %d times %v", i, len(runs), runs))
		}
	}
	if bad != nil {
		return errors.New(strings.Join(bad, "; "))
	}
	fmt.Fprintf(g.out, "ok: %d slots, each ran exactly once\n", len(g.runs))
	return nil
}
