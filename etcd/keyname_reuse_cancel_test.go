package etcd

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// Waits of one Locker on a held key are cancelled again and again while
// others of the same Locker join the same queue: a cancelled wait frees its
// key name (abandon) before its handle leaves the loss watch, and the next
// attempt may take that name at once. Afterwards every lock the Locker
// gets on the key must be exclusive, carry a larger token than the last,
// and be reported lost when its key is deleted.
func TestKeyNameReusedAcrossCancelledWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 120*time.Second)
	l := e.locker()
	other := e.locker()
	const key = "reuse-cancel"
	held, err := other.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(4 * time.Second)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				c, cancel := context.WithTimeout(ctx, time.Duration(5+(g*7+i*3)%40)*time.Millisecond)
				ls, err := l.Acquire(c, key, distlock.WithTTL(30*time.Second))
				cancel()
				if err == nil {
					t.Errorf("acquired %q while another Locker holds it", key)
					_ = ls.Release(ctx)
				}
			}
		}()
	}
	wg.Wait()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var inside atomic.Int32
	var mu sync.Mutex
	var last int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				ls, err := l.Acquire(ctx, key, distlock.WithTTL(30*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders of %q at once", n, key)
				}
				mu.Lock()
				if tok := int64(ls.Token()); tok <= last {
					t.Errorf("token %d after %d", tok, last)
				} else {
					last = tok
				}
				mu.Unlock()
				if (g+i)%3 == 0 {
					inside.Add(-1)
					if _, err := e.admin.Delete(ctx, ownerKey(t, ls)); err != nil {
						t.Error(err)
						return
					}
					select {
					case <-ls.Done():
					case <-time.After(lossNotice):
						t.Errorf("goroutine %d, lock %d: Done did not close within %v of its key's deletion", g, i, lossNotice)
					}
					continue
				}
				time.Sleep(2 * time.Millisecond)
				inside.Add(-1)
				if err := ls.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	h, err := l.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h.Held || h.Waiters != 0 {
		t.Fatalf("after every lock ended: %+v", h)
	}
}
