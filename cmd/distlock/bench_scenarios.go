package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
)

// benchTTL is the TTL of measured leases: long enough not to expire during
// a measurement, short enough that a lock left by a failed step frees soon.
const benchTTL = 10 * time.Second

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func uncontended(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
	ls, err := b.lockersN(ctx, 1)
	if err != nil {
		return nil, nil, err
	}
	l := ls[0]
	var lat []float64
	begin := time.Now()
	end := begin.Add(b.cfg.duration)
	for time.Now().Before(end) || len(lat) < 3 {
		cctx, cancel := context.WithTimeout(ctx, benchTTL)
		t0 := time.Now()
		lease, err := l.TryAcquire(cctx, key, distlock.WithTTL(benchTTL))
		if err == nil {
			err = lease.Release(cctx)
		}
		cancel()
		if err != nil {
			return nil, nil, err
		}
		lat = append(lat, ms(time.Since(t0)))
	}
	el := time.Since(begin)
	return []value{
		{"p50", "ms", pct(lat, 50)}, {"p99", "ms", pct(lat, 99)}, {"p99.9", "ms", pct(lat, 99.9)},
		{"ops/s", "ops/s", float64(len(lat)) / el.Seconds()}, {"samples", "n", float64(len(lat))},
	}, lat, nil
}

func contended(ctx context.Context, b *backend, key string, k int) ([]value, []float64, error) {
	ls, err := b.lockersN(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	begin := time.Now()
	actx, cancel := context.WithDeadline(ctx, begin.Add(b.cfg.duration))
	defer cancel()
	counts := make([]int, k)
	waits := make([][]float64, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			for actx.Err() == nil {
				t0 := time.Now()
				lease, err := ls[i].Acquire(actx, key, distlock.WithTTL(benchTTL))
				if err != nil {
					if actx.Err() == nil {
						errs[i] = err
					}
					return
				}
				waits[i] = append(waits[i], ms(time.Since(t0)))
				rctx, rcancel := context.WithTimeout(ctx, benchTTL)
				err = lease.Release(rctx)
				rcancel()
				if err != nil {
					errs[i] = err
					return
				}
				counts[i]++
			}
		})
	}
	wg.Wait()
	el := time.Since(begin)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	all := slices.Concat(waits...)
	total := 0
	for _, n := range counts {
		total += n
	}
	return []value{
		{"ops/s", "ops/s", float64(total) / el.Seconds()},
		{"wait p50", "ms", pct(all, 50)}, {"wait p99", "ms", pct(all, 99)},
		{"min/client", "acq", float64(slices.Min(counts))}, {"max/client", "acq", float64(slices.Max(counts))},
	}, all, nil
}

func manyKeys(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
	const workers, keysEach = 8, 64
	ls, err := b.lockersN(ctx, 1)
	if err != nil {
		return nil, nil, err
	}
	l := ls[0]
	begin := time.Now()
	end := begin.Add(b.cfg.duration)
	lats := make([][]float64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				k := fmt.Sprintf("%s/w%d/%d", key, w, i%keysEach)
				cctx, cancel := context.WithTimeout(ctx, benchTTL)
				t0 := time.Now()
				lease, err := l.TryAcquire(cctx, k, distlock.WithTTL(benchTTL))
				if err == nil {
					err = lease.Release(cctx)
				}
				cancel()
				if err != nil {
					errs[w] = err
					return
				}
				lats[w] = append(lats[w], ms(time.Since(t0)))
			}
		})
	}
	wg.Wait()
	el := time.Since(begin)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	all := slices.Concat(lats...)
	return []value{
		{"ops/s", "ops/s", float64(len(all)) / el.Seconds()},
		{"p50", "ms", pct(all, 50)}, {"p99", "ms", pct(all, 99)},
	}, all, nil
}

// handoff measures release → next holder: A holds for hold while B waits in
// Acquire; the time from just before A's Release to B's Acquire returning,
// both read in this process (one monotonic clock).
func handoff(ctx context.Context, b *backend, key string, hold time.Duration) ([]value, []float64, error) {
	ls, err := b.lockersN(ctx, 2)
	if err != nil {
		return nil, nil, err
	}
	a, w := ls[0], ls[1]
	type got struct {
		lease *distlock.Lease
		at    time.Time
		err   error
	}
	var lat []float64
	end := time.Now().Add(b.cfg.duration)
	for time.Now().Before(end) || len(lat) < 3 {
		cctx, cancel := context.WithTimeout(ctx, benchTTL)
		la, err := a.Acquire(cctx, key, distlock.WithTTL(benchTTL))
		if err != nil {
			cancel()
			return nil, nil, err
		}
		ch := make(chan got, 1)
		go func() {
			lb, err := w.Acquire(cctx, key, distlock.WithTTL(benchTTL))
			ch <- got{lb, time.Now(), err}
		}()
		if hold > 0 {
			time.Sleep(hold)
		}
		released := time.Now()
		err = la.Release(cctx)
		g := <-ch
		if g.err == nil {
			err = errors.Join(err, g.lease.Release(cctx))
		}
		cancel()
		if err = errors.Join(err, g.err); err != nil {
			return nil, nil, err
		}
		lat = append(lat, ms(g.at.Sub(released)))
	}
	return []value{{"p50", "ms", pct(lat, 50)}, {"p99", "ms", pct(lat, 99)}, {"samples", "n", float64(len(lat))}}, lat, nil
}

// crash measures how long a key stays locked after its holder dies without
// releasing: a "distlock hold" process is SIGKILLed while a client waits.
// mem:// cannot be shared with another process, so there the holder is a
// lease in this process that is abandoned right after a refresh.
func crash(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
	ttl := b.cfg.crashTTL
	ls, err := b.lockersN(ctx, 2)
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*ttl+30*time.Second)
	defer cancel()

	var crashNow func() error
	if strings.HasPrefix(b.url, "mem:") {
		lease, err := ls[0].Acquire(wctx, key, distlock.WithTTL(ttl))
		if err != nil {
			return nil, nil, err
		}
		crashNow = func() error { return lease.Refresh(wctx) } // its last sign of life
	} else {
		kill, err := startHolder(wctx, b.url, key, ttl)
		if err != nil {
			return nil, nil, err
		}
		defer kill()
		crashNow = kill
	}
	type got struct {
		lease *distlock.Lease
		at    time.Time
		err   error
	}
	ch := make(chan got, 1)
	go func() {
		l, err := ls[1].Acquire(wctx, key, distlock.WithTTL(benchTTL))
		ch <- got{l, time.Now(), err}
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter start waiting
	crashed := time.Now()
	if err := crashNow(); err != nil {
		cancel()
		<-ch
		return nil, nil, fmt.Errorf("crashing the holder: %w", err)
	}
	g := <-ch
	if g.err != nil {
		return nil, nil, g.err
	}
	_ = g.lease.Release(wctx)
	free := g.at.Sub(crashed)
	return []value{{"free after", "s", free.Seconds()}, {"ttl", "s", ttl.Seconds()}}, []float64{ms(free)}, nil
}
