package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock"
)

// heldTTL is the TTL of the held-leases measurement: renewed every second.
const heldTTL = 3 * time.Second

// heldFew is the number of held leases the acquire rate at n held is
// compared with.
const heldFew = 200

// heldRateWindow is the least time each acquire rate is measured over: one
// renewal interval, so that a renewal of every held lease falls inside it.
const heldRateWindow = heldTTL / 3

// held measures one process holding n auto-renewing leases on distinct
// keys: the acquire rate with heldFew held against the rate with n held
// (each timed over at least a renewal interval and window, by acquiring and
// releasing one more auto-renewing lease at a time, so the held count stays),
// goroutines per held lease, the process CPU spent while only renewing
// (one TTL, three renewals of each lease), leases lost meanwhile, and the
// time to release them all. A Locker of its own, closed at the end.
func held(ctx context.Context, b *backend, key string, n int, window time.Duration) ([]value, []float64, error) {
	if n < 2*heldFew {
		return nil, nil, fmt.Errorf("held: %d leases, want at least %d", n, 2*heldFew)
	}
	window = max(window, heldRateWindow)
	l, err := openLocker(ctx, b.url)
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	// Warm up: connections dialled, scripts loaded, before anything is timed.
	for i := range 20 {
		ls, err := l.TryAcquire(ctx, fmt.Sprintf("%s-warm-%d", key, i), distlock.WithTTL(heldTTL))
		if err != nil {
			return nil, nil, fmt.Errorf("held: warm-up: %w", err)
		}
		_ = ls.Release(ctx)
	}
	base := runtime.NumGoroutine()
	leases := make([]*distlock.Lease, 0, n)
	fill := func(upTo int) error {
		for len(leases) < upTo {
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("%s-%d", key, len(leases)), distlock.WithTTL(heldTTL), distlock.WithAutoRenew(true))
			if err != nil {
				return fmt.Errorf("held: acquire %d: %w", len(leases), err)
			}
			leases = append(leases, ls)
		}
		return nil
	}
	defer func() {
		for _, ls := range leases {
			_ = ls.Release(context.Background())
		}
	}()
	// rate times only the acquires; each probe lease is released at once
	// (untimed) so the held count stays where fill left it.
	probes := 0
	rate := func() (float64, error) {
		var spent time.Duration
		count := 0
		for t0 := time.Now(); time.Since(t0) < window || count < 20; count++ {
			t := time.Now()
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("%s-probe-%d", key, probes), distlock.WithTTL(heldTTL), distlock.WithAutoRenew(true))
			spent += time.Since(t)
			probes++
			if err != nil {
				return 0, fmt.Errorf("held: probe acquire with %d held: %w", len(leases), err)
			}
			if err := ls.Release(ctx); err != nil {
				return 0, fmt.Errorf("held: probe release with %d held: %w", len(leases), err)
			}
		}
		return float64(count) / spent.Seconds(), nil
	}
	if err := fill(heldFew); err != nil {
		return nil, nil, err
	}
	rateFew, err := rate()
	if err != nil {
		return nil, nil, err
	}
	if err := fill(n); err != nil {
		return nil, nil, err
	}
	rateMany, err := rate()
	if err != nil {
		return nil, nil, err
	}
	perLease := float64(settledGoroutines(ctx, base)-base) / float64(n)

	cpu0, t0 := cpuTime(), time.Now()
	select {
	case <-time.After(heldTTL):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	renewCPU := 100 * (cpuTime() - cpu0).Seconds() / time.Since(t0).Seconds()
	lost := 0
	for _, ls := range leases {
		if ls.Err() != nil {
			lost++
		}
	}

	t1 := time.Now()
	var wg sync.WaitGroup
	work := make(chan *distlock.Lease)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ls := range work {
				_ = ls.Release(ctx)
			}
		}()
	}
	for _, ls := range leases {
		work <- ls
	}
	close(work)
	wg.Wait()
	release := time.Since(t1)
	leases = nil

	return []value{
		{fmt.Sprintf("acquire/s, %d held", heldFew), "ops/s", rateFew},
		{fmt.Sprintf("acquire/s, %d held", n), "ops/s", rateMany},
		{"rate ratio", "x", rateMany / rateFew},
		{"goroutines per lease", "n", perLease},
		{"renewal CPU", "% of a core", renewCPU},
		{"lost while renewing", "n", float64(lost)},
		{"release all (16 at once)", "s", release.Seconds()},
	}, nil, nil
}

// cpuTime is the CPU (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// settledGoroutines returns the fewest goroutines the process runs over up
// to half a second (stopping early at base): goroutines still finishing the
// probes' releases must not count as held leases' own, while a goroutine
// each lease keeps stays in every sample.
func settledGoroutines(ctx context.Context, base int) int {
	fewest := runtime.NumGoroutine()
	for deadline := time.Now().Add(500 * time.Millisecond); fewest > base && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(10 * time.Millisecond)
		fewest = min(fewest, runtime.NumGoroutine())
	}
	return fewest
}
