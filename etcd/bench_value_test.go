package etcd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkValue: acquire+release with and without a holder value
// (WithValue), which the Put that creates the queue key carries.
func BenchmarkValue(b *testing.B) {
	s := testserver.Etcd(b)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		value string
	}{{"none", ""}, {"64B", strings.Repeat("v", 64)}, {"1KiB", strings.Repeat("v", distlock.MaxValueLen)}} {
		b.Run("TryAcquire+Release/"+tc.name, func(b *testing.B) {
			l, err := New(newClient(b, []string{s.Addr()}))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for b.Loop() {
				ls, err := l.TryAcquire(ctx, "value", distlock.WithTTL(30*time.Second), distlock.WithValue(tc.value))
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInspect: Inspect of a held key with waiters queued (a Get, then
// the holder's lease), and of a free key (the Get only).
func BenchmarkInspect(b *testing.B) {
	s := testserver.Etcd(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newLocker := func() distlock.Locker {
		l, err := New(newClient(b, []string{s.Addr()}))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	l := newLocker()
	ls, err := l.TryAcquire(ctx, "held", distlock.WithTTL(30*time.Second), distlock.WithValue(strings.Repeat("v", 64)))
	if err != nil {
		b.Fatal(err)
	}
	defer ls.Release(ctx)
	for range 2 {
		go func() { _, _ = newLocker().Acquire(ctx, "held") }()
	}
	for {
		h, err := l.Inspect(ctx, "held")
		if err != nil {
			b.Fatal(err)
		}
		if h.Waiters == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, key := range []string{"held", "free"} {
		b.Run(key, func(b *testing.B) {
			for b.Loop() {
				if _, err := l.Inspect(ctx, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
