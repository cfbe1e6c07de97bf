package memory_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
)

// Refresh(WithTTL(shorter)) on an auto-renewing lease must move the renewal
// schedule too, or the lease dies at the new, nearer deadline.
func TestShorterTTLKeepsRenewingLease(t *testing.T) {
	l, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := l.Acquire(t.Context(), "k", distlock.WithTTL(3*time.Second), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the keeper goroutine is running
	if err := a.Refresh(t.Context(), distlock.WithTTL(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
		t.Fatalf("auto-renewing lease died after Refresh(WithTTL(500ms)) from 3s: %v", a.Err())
	case <-time.After(3 * time.Second):
	}
}
