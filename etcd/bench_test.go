package etcd

// Benchmarks against a real single-member etcd started by the benchmark,
// side by side with etcd's own concurrency.Mutex on the same server:
//
//	go test -run '^$' -bench . -benchtime 300x ./etcd/
//
// A fixed iteration count keeps the percentiles meaningful for the 50 ms
// hand-off, whose iterations take at least the hold time each.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// latencies collects per-operation durations and reports p50/p99 in ms.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	pct := func(p float64) float64 {
		return float64(l.d[min(len(l.d)-1, int(p*float64(len(l.d))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// lockPair is one side of a benchmark: a way to lock and unlock one key.
type lockPair struct {
	lock   func(ctx context.Context) error
	unlock func(ctx context.Context) error
}

func distlockSide(b *testing.B, addr, key string, try bool, opts ...distlock.Option) lockPair {
	l, err := New(newClient(b, []string{addr}), append([]distlock.Option{distlock.WithTTL(30 * time.Second)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	var ls *distlock.Lease
	acquire := l.Acquire
	if try {
		acquire = l.TryAcquire
	}
	return lockPair{
		lock: func(ctx context.Context) (err error) {
			ls, err = acquire(ctx, key)
			return err
		},
		unlock: func(ctx context.Context) error { return ls.Release(ctx) },
	}
}

func mutexSide(b *testing.B, addr, key string) lockPair {
	s, err := concurrency.NewSession(newClient(b, []string{addr}), concurrency.WithTTL(30))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	m := concurrency.NewMutex(s, "mutex/"+key)
	return lockPair{lock: m.Lock, unlock: m.Unlock}
}

// BenchmarkUncontended: acquire + release of a free key, one goroutine.
func BenchmarkUncontended(b *testing.B) {
	s := testserver.Etcd(b)
	sides := []struct {
		name string
		make func(b *testing.B) lockPair
	}{
		{"distlock-Acquire", func(b *testing.B) lockPair { return distlockSide(b, s.Addr(), "u-acquire", false) }},
		{"distlock-TryAcquire", func(b *testing.B) lockPair { return distlockSide(b, s.Addr(), "u-try", true) }},
		{"distlock-Acquire-nolosswatch", func(b *testing.B) lockPair {
			return distlockSide(b, s.Addr(), "u-nowatch", false, WithLossWatch(false))
		}},
		{"concurrency.Mutex", func(b *testing.B) lockPair { return mutexSide(b, s.Addr(), "u-mutex") }},
	}
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			p := side.make(b)
			ctx := context.Background()
			var lat latencies
			for b.Loop() {
				start := time.Now()
				if err := p.lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := p.unlock(ctx); err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(start))
			}
			lat.report(b)
		})
	}
}

// BenchmarkHandoff: two parties take turns on one key, each holding it for
// the hold time while the other waits in the queue; the latency is from the
// start of the holder's release to the waiter's acquire returning.
func BenchmarkHandoff(b *testing.B) {
	s := testserver.Etcd(b)
	for _, hold := range []time.Duration{5 * time.Millisecond, 50 * time.Millisecond} {
		for _, impl := range []string{"distlock", "concurrency.Mutex"} {
			b.Run(impl+"/hold="+hold.String(), func(b *testing.B) {
				key := "handoff-" + hold.String()
				var sides [2]lockPair
				for i := range sides {
					if impl == "distlock" {
						sides[i] = distlockSide(b, s.Addr(), key, false)
					} else {
						sides[i] = mutexSide(b, s.Addr(), key)
					}
				}
				handoff(b, sides, hold)
			})
		}
	}
}

func handoff(b *testing.B, sides [2]lockPair, hold time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		lat     latencies
		relAt   atomic.Int64 // UnixNano at the start of the latest release
		turns   atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	n := int64(b.N)
	b.ResetTimer()
	for _, p := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for turns.Add(1) <= n {
				if err := p.lock(ctx); err != nil {
					errOnce.Do(func() { failed = err; cancel() })
					return
				}
				if at := relAt.Load(); at != 0 {
					lat.add(time.Since(time.Unix(0, at)))
				}
				time.Sleep(hold)
				relAt.Store(time.Now().UnixNano())
				if err := p.unlock(ctx); err != nil {
					errOnce.Do(func() { failed = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	lat.report(b)
}

// BenchmarkContended: k clients (each its own Locker and etcd client) on one
// key, each acquiring and releasing with zero hold, as distlock's contended
// measurement does. It runs for a fixed time per iteration batch and reports
// the acquire wait p50/p99 and acquisitions per second.
func BenchmarkContended(b *testing.B) {
	s := testserver.Etcd(b)
	for _, k := range []int{2, 8} {
		for _, impl := range []string{"distlock", "concurrency.Mutex"} {
			b.Run(fmt.Sprintf("%s/k=%d", impl, k), func(b *testing.B) {
				key := fmt.Sprintf("contended-%d", k)
				sides := make([]lockPair, k)
				for i := range sides {
					if impl == "distlock" {
						sides[i] = distlockSide(b, s.Addr(), key, false)
					} else {
						sides[i] = mutexSide(b, s.Addr(), key)
					}
				}
				contended(b, sides)
			})
		}
	}
}

// contended runs b.N acquisitions in all, spread over the sides racing for
// the key.
func contended(b *testing.B, sides []lockPair) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		lat     latencies
		left    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	begin := time.Now()
	for _, p := range sides {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				if err := p.lock(ctx); err != nil {
					errOnce.Do(func() { failed = err; cancel() })
					return
				}
				lat.add(time.Since(t0))
				if err := p.unlock(ctx); err != nil {
					errOnce.Do(func() { failed = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(begin)
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	lat.report(b)
	b.ReportMetric(float64(b.N)/el.Seconds(), "acq/s")
}
