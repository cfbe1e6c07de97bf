package redis_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

// Run with: go test -run '^$' -bench . -benchtime 2s ./redis/

const benchTTL = 30 * time.Second

// BenchmarkUncontended: acquire+release of a free key, through the Locker
// (token included), next to the 2-round-trip floor on the same client.
func BenchmarkUncontended(b *testing.B) {
	srv := testserver.Redis(b)
	ctx := context.Background()

	b.Run("Locker.Acquire+Release", func(b *testing.B) {
		l := newLocker(b, srv.Addr())
		for b.Loop() {
			ls, err := l.Acquire(ctx, "uncontended", distlock.WithTTL(benchTTL))
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As most callers do: a context that can end (a request's, a
	// shutdown's), which the Locker must watch along with its own Close.
	b.Run("Locker.Acquire+Release/cancelable-ctx", func(b *testing.B) {
		l := newLocker(b, srv.Addr())
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for b.Loop() {
			ls, err := l.Acquire(ctx, "uncontended", distlock.WithTTL(benchTTL))
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Locker.TryAcquire+Release", func(b *testing.B) {
		l := newLocker(b, srv.Addr())
		for b.Loop() {
			ls, err := l.TryAcquire(ctx, "uncontended", distlock.WithTTL(benchTTL))
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AcquireOn+ReleaseOn", func(b *testing.B) {
		c := newClient(b, srv.Addr())
		k := redisnode.KeysFor("bench:", "node")
		for b.Loop() {
			r, err := redisnode.AcquireOn(ctx, c, k, "owner", benchTTL, "")
			if err != nil || !r.Acquired {
				b.Fatal(r, err)
			}
			if ok, err := redisnode.ReleaseOn(ctx, c, k, "owner", 0, false); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	// The floor: a bare SET NX PX and an EVALSHA compare-and-delete, no
	// token, no portable layer.
	b.Run("Baseline.SETNX+EVALSHA", func(b *testing.B) {
		c := newClient(b, srv.Addr())
		del := goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
		if err := del.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			ok, err := c.SetNX(ctx, "bench:bare", "owner", benchTTL).Result()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if n, err := del.EvalSha(ctx, c, []string{"bench:bare"}, "owner").Int(); err != nil || n != 1 {
				b.Fatal(n, err)
			}
		}
	})
}

// BenchmarkUncontendedPaired alternates a Locker acquire+release with the
// bare SET NX PX + EVALSHA floor in every iteration, so that load from other
// processes hits both alike, and reports their ratio.
func BenchmarkUncontendedPaired(b *testing.B) {
	srv := testserver.Redis(b)
	ctx := context.Background()
	l := newLocker(b, srv.Addr())
	c := newClient(b, srv.Addr())
	del := goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	if err := del.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	var locker, bare time.Duration
	for b.Loop() {
		t0 := time.Now()
		ls, err := l.Acquire(ctx, "paired", distlock.WithTTL(benchTTL))
		if err != nil {
			b.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if ok, err := c.SetNX(ctx, "bench:bare", "owner", benchTTL).Result(); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if n, err := del.EvalSha(ctx, c, []string{"bench:bare"}, "owner").Int(); err != nil || n != 1 {
			b.Fatal(n, err)
		}
		locker += t1.Sub(t0)
		bare += time.Since(t1)
	}
	b.ReportMetric(float64(locker.Microseconds())/float64(b.N), "locker-us/op")
	b.ReportMetric(float64(bare.Microseconds())/float64(b.N), "bare-us/op")
	b.ReportMetric(float64(locker)/float64(bare), "locker/bare")
}

// BenchmarkContended: 8 goroutines, each with its own Locker (client), take
// one key in turn with zero hold time. Reports the acquire latency
// percentiles and how evenly the acquisitions were spread.
func BenchmarkContended(b *testing.B) {
	srv := testserver.Redis(b)
	const workers = 8
	lockers := make([]distlock.Locker, workers)
	for i := range lockers {
		lockers[i] = newLocker(b, srv.Addr())
	}
	ctx := context.Background()
	var (
		claimed atomic.Int64
		mu      sync.Mutex
		waits   []time.Duration
		counts  = make([]int, workers)
		wg      sync.WaitGroup
	)
	b.ResetTimer()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for claimed.Add(1) <= int64(b.N) {
				start := time.Now()
				actx, cancel := context.WithTimeout(ctx, time.Minute)
				ls, err := lockers[w].Acquire(actx, "contended", distlock.WithTTL(benchTTL))
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(start))
				if err := ls.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
			mu.Lock()
			waits = append(waits, mine...)
			counts[w] = len(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	if len(waits) == 0 {
		return
	}
	slices.Sort(waits)
	pct := func(p float64) float64 {
		return float64(waits[min(len(waits)-1, int(p*float64(len(waits))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "wait-p50-ms")
	b.ReportMetric(pct(0.99), "wait-p99-ms")
	b.ReportMetric(float64(slices.Min(counts)), "min-acq/goroutine")
	b.ReportMetric(float64(slices.Max(counts)), "max-acq/goroutine")
}

// BenchmarkManyKeys: parallel acquire+release over 10,000 keys from one
// Locker, so collisions are rare and throughput is the server's and the
// client's.
func BenchmarkManyKeys(b *testing.B) {
	srv := testserver.Redis(b)
	l := newLocker(b, srv.Addr())
	ctx := context.Background()
	const nkeys = 10000
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "many/" + strconv.Itoa(i)
	}
	var busy atomic.Int64
	b.SetParallelism(4) // 4 × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ls, err := l.TryAcquire(ctx, keys[rand.IntN(nkeys)], distlock.WithTTL(benchTTL))
			if err != nil {
				busy.Add(1) // another goroutine has this key right now
				continue
			}
			if err := ls.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(busy.Load())/float64(b.N), "held-ratio")
}
