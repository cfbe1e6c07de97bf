// Package electbench measures observer latency of a leader election: how
// long after a new leader is elected an observer of the role is told about
// it.
//
// Two candidates, each with its own client as separate processes would
// have, campaign for one role again and again: the leader holds until the
// observer has reported it (then a random HoldMin..HoldMax more), resigns and
// campaigns again, so the other candidate, already waiting, is elected. A
// third client observes the role. Every time is read in this one process
// from the monotonic clock:
//
//   - elected → notified: from the new leader's Campaign returning to the
//     observer receiving that leader. Both sides learn of the change from
//     the server, so this is negative when the observer hears first.
//   - resign → notified: from the old leader's Resign call starting to the
//     observer receiving its successor: the whole hand-over as an observer
//     sees it.
//   - resign → elected: from the same Resign call to the successor's
//     Campaign returning: the hand-over as the candidates see it.
//
// The package is shared by `distlock bench` (distlock only) and
// cmd/internal/peerbench (distlock next to etcd's concurrency.Election);
// an [Elector] adapts one library's client.
package electbench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
)

// Elector is one client of an election library, bound to one role.
type Elector interface {
	// Campaign waits until this client leads with value, and returns
	// how to resign.
	Campaign(ctx context.Context, value string) (resign func(context.Context) error, err error)
	// Observe starts following the role: seen is called with the value
	// of each leader as it is received, from one goroutine. stop ends
	// the observation and returns once seen is no longer called.
	Observe(ctx context.Context, seen func(value string)) (stop func(), err error)
}

// Config is how long and how a run goes.
type Config struct {
	Duration time.Duration // candidates start no campaign after it (once MinChanges are done)
	// A leader holds a random HoldMin..HoldMax after the observer has
	// seen it. Holds under 100 ms slow etcd's concurrency.Election down:
	// its Campaign watches from a past revision, which the server serves
	// from a resync loop every 100 ms until it catches up.
	HoldMin, HoldMax time.Duration
	SeenTimeout      time.Duration // a leader not seen by then is counted as missed and resigns
	MinChanges       int           // measured changes wanted even if Duration has passed
}

// withDefaults fills Config's zero fields.
func (c Config) withDefaults() Config {
	if c.Duration <= 0 {
		c.Duration = time.Second
	}
	if c.SeenTimeout <= 0 {
		c.SeenTimeout = 10 * time.Second
	}
	if c.MinChanges <= 0 {
		c.MinChanges = 10
	}
	c.HoldMin = min(max(c.HoldMin, 0), c.HoldMax)
	return c
}

// Result is one run: every measured change's latencies.
type Result struct {
	// Changes are the terms measured (the first term is not: the
	// observer may still be setting up).
	Changes int
	// Missed are terms the observer did not report within SeenTimeout.
	Missed int
	// ObserverFirst counts changes the observer reported before the new
	// leader's Campaign returned.
	ObserverFirst int
	Elected       []time.Duration // elected → notified, one per change
	Handover      []time.Duration // old leader's Resign call → notified
	// Elect is the old leader's Resign call → the new one's Campaign
	// returning: the hand-over as the candidates see it (Handover less
	// Elected).
	Elect []time.Duration
}

// term is one leader's timeline.
type term struct {
	elected, prevResign, seen time.Time
	seenCh                    chan struct{} // closed when seen
}

// tracker joins what the candidates and the observer stamp, by value.
type tracker struct {
	mu         sync.Mutex
	terms      map[string]*term
	order      []string // values in election order
	lastResign time.Time
}

func (t *tracker) get(v string) *term {
	tm := t.terms[v]
	if tm == nil {
		tm = &term{seenCh: make(chan struct{})}
		t.terms[v] = tm
	}
	return tm
}

func (t *tracker) seen(v string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tm := t.get(v)
	if tm.seen.IsZero() {
		tm.seen = at
		close(tm.seenCh)
	}
}

func (t *tracker) elected(v string, at time.Time) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	tm := t.get(v)
	tm.elected, tm.prevResign = at, t.lastResign
	t.order = append(t.order, v)
	return tm.seenCh
}

func (t *tracker) resigning(at time.Time) {
	t.mu.Lock()
	t.lastResign = at
	t.mu.Unlock()
}

// drainLimit bounds how long the campaigns under way at the end may take.
const drainLimit = 30 * time.Second

// Run measures one run: candidates a and b hand over leadership while obs
// observes. The Electors are the caller's to close.
func Run(ctx context.Context, a, b, obs Elector, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	tr := &tracker{terms: map[string]*term{}}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	stop, err := obs.Observe(octx, func(v string) { tr.seen(v, time.Now()) })
	if err != nil {
		return Result{}, fmt.Errorf("observe: %w", err)
	}
	defer stop()

	end := time.Now().Add(cfg.Duration)
	cctx, cancel := context.WithDeadline(ctx, end.Add(drainLimit))
	defer cancel()
	var (
		terms  atomic.Int64
		missed atomic.Int64
		wg     sync.WaitGroup
		errs   [2]error
	)
	for i, c := range []Elector{a, b} {
		wg.Go(func() {
			for n := 0; ; n++ {
				if time.Now().After(end) && terms.Load() > int64(cfg.MinChanges) {
					return
				}
				v := fmt.Sprintf("c%d-%d", i, n)
				resign, err := c.Campaign(cctx, v)
				if err != nil {
					errs[i] = fmt.Errorf("campaign: %w", err)
					cancel() // the other candidate would wait for ever
					return
				}
				seenCh := tr.elected(v, time.Now())
				terms.Add(1)
				t := time.NewTimer(cfg.SeenTimeout)
				select {
				case <-seenCh:
				case <-t.C:
					missed.Add(1)
				case <-cctx.Done():
				}
				t.Stop()
				if cfg.HoldMax > 0 {
					time.Sleep(cfg.HoldMin + rand.N(cfg.HoldMax-cfg.HoldMin+1))
				}
				tr.resigning(time.Now())
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err = resign(rctx)
				rcancel()
				if err != nil {
					errs[i] = fmt.Errorf("resign: %w", err)
					cancel()
					return
				}
				if cctx.Err() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs[0], errs[1]); err != nil {
		return Result{}, err
	}
	stop()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := Result{Missed: int(missed.Load())}
	for i, v := range tr.order {
		tm := tr.terms[v]
		if i == 0 || tm.seen.IsZero() {
			continue
		}
		r.Changes++
		d := tm.seen.Sub(tm.elected)
		if d < 0 {
			r.ObserverFirst++
		}
		r.Elected = append(r.Elected, d)
		r.Handover = append(r.Handover, tm.seen.Sub(tm.prevResign))
		r.Elect = append(r.Elect, tm.elected.Sub(tm.prevResign))
	}
	return r, nil
}

// Percentile is the nearest-rank percentile p of xs (0 for none).
func Percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Distlock adapts an election on l: every candidate and the observer need
// their own Locker. observeOpts go to Observe (WithBackoff's cap bounds the
// polling on backends without server watches).
func Distlock(l distlock.Locker, role string, observeOpts ...distlock.CallOption) (Elector, error) {
	e, err := election.New(l, role)
	if err != nil {
		return nil, err
	}
	return dlElector{e: e, opts: observeOpts}, nil
}

type dlElector struct {
	e    *election.Election
	opts []distlock.CallOption
}

func (d dlElector) Campaign(ctx context.Context, value string) (func(context.Context) error, error) {
	t, err := d.e.Campaign(ctx, value)
	if err != nil {
		return nil, err
	}
	return t.Resign, nil
}

func (d dlElector) Observe(ctx context.Context, seen func(string)) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	ch, err := d.e.Observe(ctx, d.opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return Follow(ch, cancel, func(ld election.Leader) (string, bool) { return ld.Value, true }, seen), nil
}

// Follow calls seen with the value of everything ch delivers, from a
// goroutine of its own, until ch closes (cancel must make it close). The
// returned stop cancels and waits for that goroutine.
func Follow[T any](ch <-chan T, cancel context.CancelFunc, value func(T) (string, bool), seen func(string)) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for x := range ch {
			if v, ok := value(x); ok {
				seen(v)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
