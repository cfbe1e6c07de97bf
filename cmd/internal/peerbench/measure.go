package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
)

// scenario is one workload, run the same way on both sides of a pair.
type scenario struct {
	id      string
	title   string
	workers int
	keys    int           // worker i locks key i % keys
	hold    time.Duration // time between grant and release
}

// The scenarios each pair is measured in. Every worker locks the same key again and
// again (uncontended: its own key), with a waiting acquire.
var scenarios = []scenario{
	{id: "uncontended", title: "uncontended (1 worker, 1 key)", workers: 1, keys: 1},
	{id: "8keys", title: "8 workers, 8 keys", workers: 8, keys: 8},
	{id: "1key-hold5ms", title: "8 workers, 1 key, 5 ms hold", workers: 8, keys: 1, hold: 5 * time.Millisecond},
}

func scenarioByID(id string) *scenario {
	i := slices.IndexFunc(scenarios, func(sc scenario) bool { return sc.id == id })
	if i < 0 {
		return nil
	}
	return &scenarios[i]
}

// drainLimit bounds how long the acquires under way at the end of a run
// may still take to be granted (they are measured: cutting them off would
// drop the longest waits).
const drainLimit = 30 * time.Second

// measurement is one run of one scenario on one side.
type measurement struct {
	Ops       int     `json:"ops"`         // acquire+release cycles finished within the run
	OpsPerSec float64 `json:"ops_per_s"`   // Ops / duration
	Grants    int     `json:"grants"`      // every grant, including those of the drain
	WaitP50Ms float64 `json:"wait_p50_ms"` // acquire call to grant
	WaitP99Ms float64 `json:"wait_p99_ms"`
	// The fewest and most cycles one worker finished: far apart on one
	// key means grants go to the same workers again and again.
	MinPerWorker int `json:"min_per_worker"`
	MaxPerWorker int `json:"max_per_worker"`
	// RegrantPct is the share of grants, in percent, that went to the worker
	// that had held the key just before: a releaser that takes its key back
	// at once skips a hand-off (and makes the others wait longer).
	RegrantPct float64 `json:"regrant_pct"`
	// Allocations in this process per acquire+release, over all of the
	// run's cycles (single-worker runs only: the clients' background
	// goroutines count too, the harness's own loop allocates nothing).
	AllocsPerOp float64 `json:"allocs_per_op,omitempty"`
	BytesPerOp  float64 `json:"bytes_per_op,omitempty"`
}

// measure opens one client per worker, warms each up with one lock on a key
// of its own, then runs sc for d. Workers start no acquire after d; those
// under way are still granted, released and their waits counted.
func measure(ctx context.Context, s side, addrs []string, c config, sc scenario, d time.Duration) (measurement, error) {
	base := keyName("pb", sc.id, randHex(4))
	clients := make([]client, 0, sc.workers)
	defer func() {
		for _, cl := range clients {
			_ = cl.close()
		}
	}()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for range sc.workers {
		cl, err := s.open(octx, addrs, c)
		if err != nil {
			return measurement{}, fmt.Errorf("open: %w", err)
		}
		clients = append(clients, cl)
	}
	for i, cl := range clients {
		h, err := cl.lock(octx, keyName(base, "warm", i))
		if err == nil {
			err = cl.unlock(octx, h)
		}
		if err != nil {
			return measurement{}, fmt.Errorf("warm-up: %w", err)
		}
	}

	var (
		wg     sync.WaitGroup
		ops    = make([]int, sc.workers)
		cycles = make([]int, sc.workers)
		waits  = make([][]time.Duration, sc.workers)
		errs   = make([]error, sc.workers)
		m0, m1 runtime.MemStats
		last   = newLastHolders()
	)
	for i := range waits {
		waits[i] = make([]time.Duration, 0, 4096)
	}
	if sc.workers == 1 {
		runtime.GC()
		runtime.ReadMemStats(&m0)
	}
	begin := time.Now()
	end := begin.Add(d)
	actx, acancel := context.WithDeadline(ctx, end.Add(drainLimit))
	defer acancel()
	for i, cl := range clients {
		key := keyName(base, "k", i%sc.keys)
		wg.Go(func() {
			for time.Now().Before(end) {
				t0 := time.Now()
				h, err := cl.lock(actx, key)
				if err != nil {
					errs[i] = fmt.Errorf("lock: %w", err)
					return
				}
				waits[i] = append(waits[i], time.Since(t0))
				last.granted(key, i)
				if sc.hold > 0 {
					time.Sleep(sc.hold)
				}
				if err := cl.unlock(actx, h); err != nil {
					errs[i] = fmt.Errorf("unlock: %w", err)
					return
				}
				cycles[i]++
				if !time.Now().After(end) {
					ops[i]++
				}
			}
		})
	}
	wg.Wait()
	if sc.workers == 1 {
		runtime.ReadMemStats(&m1)
	}
	if err := errors.Join(errs...); err != nil {
		return measurement{}, err
	}
	all := slices.Concat(waits...)
	m := measurement{Ops: sum(ops), Grants: len(all), MinPerWorker: slices.Min(ops), MaxPerWorker: slices.Max(ops)}
	m.OpsPerSec = float64(m.Ops) / d.Seconds()
	m.RegrantPct = last.regrantPct()
	m.WaitP50Ms = ms(percentile(all, 50))
	m.WaitP99Ms = ms(percentile(all, 99))
	if n := sum(cycles); sc.workers == 1 && n > 0 {
		m.AllocsPerOp = float64(m1.Mallocs-m0.Mallocs) / float64(n)
		m.BytesPerOp = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n)
	}
	return m, nil
}

// lastHolders counts the grants that go back to the key's previous holder.
type lastHolders struct {
	mu               sync.Mutex
	last             map[string]int
	grants, regrants int
}

func newLastHolders() *lastHolders { return &lastHolders{last: map[string]int{}} }

// granted records that worker w was granted key (the previous holder has
// released it by then, so the calls come in grant order).
func (l *lastHolders) granted(key string, w int) {
	l.mu.Lock()
	if prev, ok := l.last[key]; ok {
		l.grants++
		if prev == w {
			l.regrants++
		}
	}
	l.last[key] = w
	l.mu.Unlock()
}

func (l *lastHolders) regrantPct() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.grants == 0 {
		return 0
	}
	return 100 * float64(l.regrants) / float64(l.grants)
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// percentile is the nearest-rank percentile p of xs (0 for none).
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
