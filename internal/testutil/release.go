package testutil

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// CheckReleaseWithDeadServer checks that Release never hangs on a dead
// server, whatever context it is given. l must have been made with
// distlock.WithReleaseTimeout(releaseTimeout); kill makes its server
// unreachable. A lease already lost by its local clock must return from
// Release(context.Background()) with ErrNotHeld at once; a lease still held
// locally within the release timeout. The bound allows a second of
// scheduling slack on a loaded machine; the audit saw 2 s to 11 minutes.
func CheckReleaseWithDeadServer(t *testing.T, l distlock.Locker, key string, releaseTimeout time.Duration, kill func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lost, err := l.TryAcquire(ctx, key+"-lost", distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held, err := l.TryAcquire(ctx, key+"-held", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	kill()
	select {
	case <-lost.Done():
	case <-ctx.Done():
		t.Fatal("a lease with a 1s TTL did not end after its server died")
	}
	bound := releaseTimeout + time.Second
	for _, c := range []struct {
		name  string
		lease *distlock.Lease
	}{{"lost", lost}, {"held", held}} {
		done := make(chan error, 1)
		began := time.Now()
		go func() { done <- c.lease.Release(context.Background()) }()
		select {
		case err := <-done:
			if c.name == "lost" && !errors.Is(err, distlock.ErrNotHeld) {
				t.Errorf("Release of the lost lease: want ErrNotHeld, got %v", err)
			}
			if took := time.Since(began); took > bound {
				t.Errorf("Release(context.Background()) of the %s lease took %v with the server dead; the release timeout is %v", c.name, took, releaseTimeout)
			}
		case <-time.After(bound + 10*time.Second):
			t.Fatalf("Release(context.Background()) of the %s lease still blocked %v after the server died; the release timeout is %v",
				c.name, time.Since(began), releaseTimeout)
		}
	}
}
