package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

type losesReply struct {
	driver.Backend
	lose    atomic.Bool
	unlocks atomic.Int32
	notHeld atomic.Int32
}

func (b *losesReply) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.TryLock(ctx, req)
	if err == nil && b.lose.Load() {
		return driver.Grant{}, errors.New("i/o timeout (the reply was lost)")
	}
	return g, err
}

func (b *losesReply) Unlock(ctx context.Context, g driver.Grant) error {
	err := b.Backend.Unlock(ctx, g)
	if g.Handle == nil {
		b.unlocks.Add(1)
		if errors.Is(err, distlock.ErrNotHeld) {
			b.notHeld.Add(1)
		}
	}
	return err
}

// A burst of abandoned attempts must not fill the Locker's 64 give-back
// slots: an attempt whose context ended while TryLock took its lease sent
// nothing, yet its give-back found no key and was asked again for the
// release timeout, and the give-back of the one attempt that landed was
// dropped (a review; such a give-back now ends at once).
func TestGiveBackAfterBurstOfAbandonedAttempts(t *testing.T) {
	s := testserver.Etcd(t)
	cli := newClient(t, []string{s.Addr()})
	bb, err := NewBackend(cli)
	if err != nil {
		t.Fatal(err)
	}
	b := &losesReply{Backend: bb}
	l, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 100 {
		if _, err := l.TryAcquire(cancelled, fmt.Sprintf("burst-%d", i), distlock.WithTTL(time.Minute)); err == nil {
			t.Fatal("TryAcquire with a cancelled context succeeded")
		}
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("give-back calls so far: %d (ErrNotHeld %d)", b.unlocks.Load(), b.notHeld.Load())
	b.lose.Store(true)
	if _, err := l.TryAcquire(t.Context(), "k", distlock.WithTTL(time.Minute)); err == nil {
		t.Fatal("the lost reply was reported as a grant")
	}
	b.lose.Store(false)
	other, err := New(newClient(t, []string{s.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	t0 := time.Now()
	for {
		ls, err := other.TryAcquire(t.Context(), "k", distlock.WithTTL(time.Minute))
		if err == nil {
			_ = ls.Release(t.Context())
			t.Logf("freed after %v", time.Since(t0))
			return
		}
		if time.Since(t0) > 3*time.Second {
			t.Fatalf("the landed attempt was not given back within 3s (TTL 1m): %v; give-back calls %d, ErrNotHeld %d",
				err, b.unlocks.Load(), b.notHeld.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
