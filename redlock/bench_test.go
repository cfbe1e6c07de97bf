package redlock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// Run with: go test -run '^$' -bench . -benchtime 2s ./redlock/

const benchTTL = 30 * time.Second

// benchNodeTimeout: with a paused node every Release waits this long for it
// (acquires do not), so ns/op of the paused case is mostly this.
const benchNodeTimeout = 20 * time.Millisecond

// percentile returns the p-th percentile of ds in milliseconds.
func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(float64(len(s))*p))]) / float64(time.Millisecond)
}

// acquireRelease measures TryAcquire (p50/p99 of the acquire alone) and
// Release on l.
func acquireRelease(b *testing.B, l distlock.Locker, key string) {
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		began := time.Now()
		ls, err := l.TryAcquire(ctx, key, distlock.WithTTL(benchTTL))
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(began))
		if err := ls.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(percentile(lat, 0.50), "acquire-p50-ms")
	b.ReportMetric(percentile(lat, 0.99), "acquire-p99-ms")
}

// BenchmarkUncontended: acquire+release of a free key on 5 nodes, with one
// of them paused (SIGSTOP), and the single-Redis backend on one of the
// same servers for comparison.
func BenchmarkUncontended(b *testing.B) {
	srvs := testserver.RedisN(b, 5)
	b.Run("redis-1node", func(b *testing.B) {
		c := goredis.NewClient(&goredis.Options{Addr: srvs[0].Addr(), ContextTimeoutEnabled: true})
		l, err := redis.New(c, redis.WithCloseClient(true))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		acquireRelease(b, l, "uncontended-single")
	})
	b.Run("redlock-5nodes", func(b *testing.B) {
		acquireRelease(b, newLocker(b, srvs, redlock.WithNodeTimeout(benchNodeTimeout)), "uncontended")
	})
	b.Run("redlock-5nodes-1paused", func(b *testing.B) {
		l := newLocker(b, srvs, redlock.WithNodeTimeout(benchNodeTimeout))
		if err := srvs[4].Pause(); err != nil {
			b.Fatal(err)
		}
		defer srvs[4].Resume()
		acquireRelease(b, l, "uncontended-paused")
	})
}

// BenchmarkContended: 8 goroutines, each with its own Locker, take turns on
// one key (blocking Acquire, then Release at once); reports the wait of
// each Acquire.
func BenchmarkContended(b *testing.B) {
	srvs := testserver.RedisN(b, 5)
	const workers = 8
	lockers := make([]distlock.Locker, workers)
	for i := range lockers {
		lockers[i] = newLocker(b, srvs)
	}
	ctx := context.Background()
	var (
		mu    sync.Mutex
		waits []time.Duration
	)
	b.ResetTimer()
	work := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for range work {
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				began := time.Now()
				ls, err := l.Acquire(actx, "contended", distlock.WithTTL(benchTTL))
				cancel()
				if err != nil {
					b.Error(err)
					continue
				}
				mine = append(mine, time.Since(began))
				if err := ls.Release(ctx); err != nil {
					b.Error(err)
				}
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		}()
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(percentile(waits, 0.50), "wait-p50-ms")
	b.ReportMetric(percentile(waits, 0.99), "wait-p99-ms")
}
