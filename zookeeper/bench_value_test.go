package zookeeper

import (
	"context"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkValue: acquire+release with and without a holder value
// (WithValue), which the create stores as the lock znode's data; and
// Inspect of a held key from another Locker (a listing and a read).
func BenchmarkValue(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	warmUp(b, srv.Addr())
	ctx := context.Background()
	value := strings.Repeat("v", 64) // an address and a version
	for _, tc := range []struct{ name, value string }{{"none", ""}, {"64B", value}} {
		b.Run("Acquire+Release/"+tc.name, func(b *testing.B) {
			l := benchLocker(b, srv.Addr())
			for b.Loop() {
				ls, err := l.Acquire(ctx, "bench-value", distlock.WithValue(tc.value))
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Inspect", func(b *testing.B) {
		holder, l := benchLocker(b, srv.Addr()), benchLocker(b, srv.Addr())
		ls, err := holder.Acquire(ctx, "bench-inspect", distlock.WithValue(value))
		if err != nil {
			b.Fatal(err)
		}
		defer ls.Release(ctx)
		for b.Loop() {
			h, err := l.Inspect(ctx, "bench-inspect")
			if err != nil || h.Token != ls.Token() {
				b.Fatalf("Inspect: %+v, %v", h, err)
			}
		}
	})
}
