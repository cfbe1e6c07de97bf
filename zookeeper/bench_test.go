package zookeeper

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// Run with: go test -run '^$' -bench . -benchtime 2s ./zookeeper/
// Each sub-benchmark pairs distlock's ZooKeeper backend with
// go-zookeeper's own zk.Lock on the same server.

func benchConn(b *testing.B, addr string) *zk.Conn {
	b.Helper()
	c, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	for c.State() != zk.StateHasSession {
		time.Sleep(time.Millisecond)
	}
	return c
}

func benchLocker(b *testing.B, addr string) distlock.Locker {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Dial(ctx, []string{addr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// warmUp runs lock-like traffic on a fresh server before the timed runs:
// its JVM is cold at first, which would otherwise slow down whichever
// sub-benchmark runs first (distlock's).
func warmUp(b *testing.B, addr string) {
	b.Helper()
	c := benchConn(b, addr)
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.Create("/bench-warmup", nil, 0, acl); err != nil && err != zk.ErrNodeExists {
		b.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		p, err := c.Create("/bench-warmup/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, acl)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Children("/bench-warmup"); err != nil {
			b.Fatal(err)
		}
		if err := c.Delete(p, -1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUncontended(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	warmUp(b, srv.Addr())
	ctx := context.Background()
	b.Run("distlock", func(b *testing.B) {
		l := benchLocker(b, srv.Addr())
		for b.Loop() {
			lease, err := l.Acquire(ctx, "bench-uncontended")
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("zk.Lock", func(b *testing.B) {
		lk := zk.NewLock(benchConn(b, srv.Addr()), "/bench-zklock/uncontended", zk.WorldACL(zk.PermAll))
		for b.Loop() {
			if err := lk.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := lk.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkContended runs 8 goroutines, each with its own session, taking
// one key in turn; it reports the wait (acquire latency) p50 and p99.
func BenchmarkContended(b *testing.B) {
	const workers = 8
	srv := testserver.ZooKeeper(b)
	warmUp(b, srv.Addr())
	run := func(b *testing.B, lock func(w int) (unlock func() error, err error)) {
		var (
			left  atomic.Int64
			mu    sync.Mutex
			waits []time.Duration
			wg    sync.WaitGroup
		)
		left.Store(int64(b.N))
		b.ResetTimer()
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for left.Add(-1) >= 0 {
					start := time.Now()
					unlock, err := lock(w)
					if err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
					if err := unlock(); err != nil {
						b.Error(err)
						return
					}
				}
				mu.Lock()
				waits = append(waits, mine...)
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
			return float64(waits[int(p*float64(len(waits)-1))].Microseconds()) / 1000
		}
		b.ReportMetric(pct(0.50), "wait-p50-ms")
		b.ReportMetric(pct(0.99), "wait-p99-ms")
	}
	b.Run("distlock", func(b *testing.B) {
		ls := make([]distlock.Locker, workers)
		for i := range ls {
			ls[i] = benchLocker(b, srv.Addr())
		}
		ctx := context.Background()
		run(b, func(w int) (func() error, error) {
			lease, err := ls[w].Acquire(ctx, "bench-contended")
			if err != nil {
				return nil, err
			}
			return func() error { return lease.Release(ctx) }, nil
		})
	})
	b.Run("zk.Lock", func(b *testing.B) {
		lks := make([]*zk.Lock, workers)
		for i := range lks {
			lks[i] = zk.NewLock(benchConn(b, srv.Addr()), "/bench-zklock/contended", zk.WorldACL(zk.PermAll))
		}
		run(b, func(w int) (func() error, error) {
			if err := lks[w].Lock(); err != nil {
				return nil, err
			}
			return lks[w].Unlock, nil
		})
	})
}
