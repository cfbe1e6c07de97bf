package testutil

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// losesReply wraps a Backend: while lose is set, a TryLock that took the
// lock reports its reply lost, as a timeout racing a landed request does.
type losesReply struct {
	driver.Backend
	lose    atomic.Bool
	unlocks atomic.Int32 // give-back calls
	notHeld atomic.Int32 // of which answered ErrNotHeld (asked again)
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

// CheckGiveBackAfterBurst checks that a burst of abandoned attempts does not
// crowd out the give-back of one that landed. Were each give-back that
// finds nothing asked again for the release timeout, the Locker's 64
// give-back slots would fill, the give-back of the attempt whose reply was
// lost after it took the lock would be dropped, and the key would stay
// held for its whole TTL. raw is a fresh Backend (owned by the check); other is a Locker
// on the same server.
func CheckGiveBackAfterBurst(t *testing.T, raw driver.Backend, other distlock.Locker) {
	t.Helper()
	b := &losesReply{Backend: raw}
	l, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 100 {
		// An attempt whose context ended: its outcome is unknown to the
		// portable layer, which gives it back.
		if _, err := l.TryAcquire(cancelled, fmt.Sprintf("burst-%d", i), distlock.WithTTL(time.Minute)); err == nil {
			t.Fatal("TryAcquire with a cancelled context succeeded")
		}
	}
	time.Sleep(200 * time.Millisecond) // the burst's give-backs have each made their call
	b.lose.Store(true)
	if _, err := l.TryAcquire(t.Context(), "k", distlock.WithTTL(time.Minute)); err == nil {
		t.Fatal("the lost reply was reported as a grant")
	}
	b.lose.Store(false)
	began := time.Now()
	for {
		ls, err := other.TryAcquire(t.Context(), "k", distlock.WithTTL(time.Minute))
		if err == nil {
			_ = ls.Release(t.Context())
			return
		}
		if time.Since(began) > 3*time.Second {
			t.Fatalf("the landed attempt was not given back within 3s (TTL 1m): %v; give-back calls %d, asked again %d",
				err, b.unlocks.Load(), b.notHeld.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
