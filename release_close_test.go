package distlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memory"
)

// slowUnlock: the next Unlock waits for its ctx (a slow server).
type slowUnlock struct {
	driver.Backend
	block   atomic.Bool
	entered chan struct{}
}

func (w *slowUnlock) Unlock(ctx context.Context, g driver.Grant) error {
	if w.block.CompareAndSwap(true, false) {
		close(w.entered)
		<-ctx.Done()
		return ctx.Err()
	}
	return w.Backend.Unlock(ctx, g)
}

// Close while a Release is in flight: Close cuts the release's call, and
// must still give the lock back (the cut Release does not end the lease;
// Close's own release does). The caller's
// context is of each kind bind tells apart: Background, one that can end,
// and one that carries values but never ends; with a release timeout of a
// minute, Close returns soon only if it cut the call.
func TestCloseDuringReleaseFreesKey(t *testing.T) {
	type key struct{}
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, ctx := range map[string]context.Context{
		"background": context.Background(),
		"cancelable": cancelable,
		"values":     context.WithValue(context.Background(), key{}, 1),
	} {
		t.Run(name, func(t *testing.T) {
			store := memory.NewStore()
			w := &slowUnlock{Backend: memory.NewBackend(store), entered: make(chan struct{})}
			l, err := distlock.New(w, distlock.WithTTL(time.Minute), distlock.WithReleaseTimeout(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ls, err := l.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			w.block.Store(true)
			rel := make(chan error, 1)
			go func() { rel <- ls.Release(ctx) }()
			<-w.entered
			closed := make(chan error, 1)
			go func() { closed <- l.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not cut the Release in flight")
			}
			t.Logf("Release: %v; lease Err: %v", <-rel, ls.Err())
			if store.Held("k") {
				t.Fatalf("after Close, key held for its whole TTL; lease lost=%v", errors.Is(ls.Err(), distlock.ErrLeaseLost))
			}
		})
	}
}
