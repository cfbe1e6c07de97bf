package distlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memory"
)

// gapRelease counts subscriptions and, on the first, runs beforeSubscribe:
// a release that lands between a failed attempt and the subscription.
type gapRelease struct {
	driver.Backend
	subscribes      atomic.Int32
	beforeSubscribe func()
}

func (g *gapRelease) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	if g.subscribes.Add(1) == 1 && g.beforeSubscribe != nil {
		g.beforeSubscribe()
	}
	return g.Backend.Subscribe(ctx, key)
}

// A free key is taken without subscribing to release notices.
func TestAcquireFreeKeyDoesNotSubscribe(t *testing.T) {
	b := &gapRelease{Backend: memory.NewBackend(memory.NewStore())}
	l, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		ls, err := l.Acquire(t.Context(), "free")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.subscribes.Load(); n != 0 {
		t.Errorf("%d subscriptions for a key nobody held, want 0", n)
	}
}

// A release between the attempt that found the key held and the
// subscription sends its notice to nobody; the waiter must still take the
// key at once (by trying again after subscribing), not after the holder's
// TTL.
func TestReleaseBeforeSubscribeIsNotMissed(t *testing.T) {
	store := memory.NewStore()
	holderLocker, err := distlock.New(memory.NewBackend(store))
	if err != nil {
		t.Fatal(err)
	}
	defer holderLocker.Close()
	holder, err := holderLocker.TryAcquire(t.Context(), "k", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b := &gapRelease{Backend: memory.NewBackend(store), beforeSubscribe: func() {
		if err := holder.Release(context.Background()); err != nil {
			t.Error(err)
		}
	}}
	// Back-off and the fallback poll far above the bound below, so only
	// the retry after subscribing can take the key in time.
	l, err := distlock.New(b, distlock.WithBackoff(30*time.Second, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second) // the fallback poll is at least 5s
	defer cancel()
	ls, err := l.Acquire(ctx, "k", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("release in the gap before the subscription was missed: %v", err)
	}
	defer ls.Release(t.Context())
	if n := b.subscribes.Load(); n != 1 {
		t.Errorf("%d subscriptions, want 1", n)
	}
}
