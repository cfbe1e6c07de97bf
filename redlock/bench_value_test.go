package redlock_test

import (
	"context"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// benchValue is a holder value of a typical size (an address and a version).
var benchValue = strings.Repeat("v", 64)

// BenchmarkValue: acquire+release and refresh with and without a holder
// value (WithValue), which the lock scripts store next to the lock.
func BenchmarkValue(b *testing.B) {
	srvs := testserver.RedisN(b, 5)
	ctx := context.Background()
	for _, tc := range []struct{ name, value string }{{"none", ""}, {"64B", benchValue}} {
		b.Run("TryAcquire+Release/"+tc.name, func(b *testing.B) {
			l := newLocker(b, srvs)
			for b.Loop() {
				ls, err := l.TryAcquire(ctx, "value", distlock.WithTTL(benchTTL), distlock.WithValue(tc.value))
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Refresh/"+tc.name, func(b *testing.B) {
			l := newLocker(b, srvs)
			ls, err := l.TryAcquire(ctx, "refresh-"+tc.name, distlock.WithTTL(benchTTL), distlock.WithValue(tc.value))
			if err != nil {
				b.Fatal(err)
			}
			defer ls.Release(ctx)
			for b.Loop() {
				if err := ls.Refresh(ctx, distlock.WithTTL(benchTTL)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInspect: one Inspect of a held key (one read-only script per node, all at once).
func BenchmarkInspect(b *testing.B) {
	srvs := testserver.RedisN(b, 5)
	ctx := context.Background()
	l := newLocker(b, srvs)
	ls, err := l.TryAcquire(ctx, "inspected", distlock.WithTTL(benchTTL), distlock.WithValue(benchValue))
	if err != nil {
		b.Fatal(err)
	}
	defer ls.Release(ctx)
	for b.Loop() {
		if h, err := l.Inspect(ctx, "inspected"); err != nil || !h.Held {
			b.Fatal(h, err)
		}
	}
}
