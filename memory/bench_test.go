package memory_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock/memory"
)

// BenchmarkUncontended is acquire+release of a free key on the in-process
// store: what the portable layer itself costs per lock, since the store's
// own work is a map update. Run with -benchmem.
func BenchmarkUncontended(b *testing.B) {
	l, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"Background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"cancelable-ctx", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx, cancel := c.ctx()
			defer cancel()
			for b.Loop() {
				ls, err := l.Acquire(ctx, "k")
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
