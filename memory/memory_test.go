package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memory"
)

// Harness returns a conformance harness on a fresh Store.
func harness() conformance.Harness {
	store := memory.NewStore()
	return conformance.Harness{
		NewBackend: func(context.Context) (driver.Backend, error) { return memory.NewBackend(store), nil },
		ForceExpire: func(_ context.Context, key string) error {
			if !store.ForceExpire(key) {
				return fmt.Errorf("key %q is not held", key)
			}
			return nil
		},
		TTL: 300 * time.Millisecond,
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness())
}

func TestOpenMem(t *testing.T) {
	ctx := context.Background()
	a, err := distlock.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := distlock.Open(ctx, "mem://?ttl=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ls, err := a.TryAcquire(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	// Both URLs name the default store, so b sees a's lock.
	if _, err := b.TryAcquire(ctx, "shared"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("second mem:// Locker: want ErrNotAcquired, got %v", err)
	}
	// A named store is separate.
	c, err := distlock.Open(ctx, "mem://other")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lc, err := c.TryAcquire(ctx, "shared")
	if err != nil {
		t.Fatalf("mem://other should not see the default store's lock: %v", err)
	}
	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if lb.TTL() != 5*time.Second {
		t.Fatalf("ttl=5s in the URL gave a lease TTL of %v", lb.TTL())
	}
	if lb.Token() <= ls.Token() {
		t.Fatalf("token %d after %d", lb.Token(), ls.Token())
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"nope://x", "mem"},           // unknown scheme lists the known ones
		{"mem://?bogus=1", "bogus"},   // unknown parameter named
		{"mem://?ttl=soon", "ttl"},    // bad duration
		{"mem://?ttl=-1s", "TTL"},     // invalid TTL
		{"::not a url", "invalid"},    // malformed
		{"localhost:6379", "scheme"},  // parsed as scheme "localhost": unknown
		{"mem://?ttl=1s&ttl=2s", "2"}, // repeated parameter
	} {
		l, err := distlock.Open(ctx, tc.url)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalid) {
			t.Errorf("Open(%q) = %v; want an error matching ErrInvalid", tc.url, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %q; want it to mention %q", tc.url, err, tc.want)
		}
	}
}
