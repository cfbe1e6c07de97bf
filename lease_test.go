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

// These tests each pin down a way the lease machinery can go wrong.

// wrap lets a test slow down or fail memory's calls; it hides Lost so the
// portable layer uses its timer path unless keepLost is set.
type wrap struct {
	driver.Backend
	keepLost     bool
	refreshBlock atomic.Bool  // Refresh waits for ctx
	refreshDelay atomic.Int64 // Refresh sleeps this long first
	unlockFail   atomic.Bool
	refreshes    atomic.Int64
}

func (w *wrap) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := w.Backend.TryLock(ctx, r)
	if !w.keepLost {
		g.Lost = nil
	}
	return g, err
}
func (w *wrap) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	w.refreshes.Add(1)
	if w.refreshBlock.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	v, err := w.Backend.Refresh(ctx, g, ttl) // applied on the server now...
	if d := w.refreshDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d)) // ...reply delayed
	}
	return v, err
}
func (w *wrap) Unlock(ctx context.Context, g driver.Grant) error {
	if w.unlockFail.Load() {
		return errors.New("network unreachable")
	}
	return w.Backend.Unlock(ctx, g)
}

// A user Refresh stuck in the backend must not keep the lease looking held
// past its deadline (it once blocked the keeper on a mutex).
func TestLeaseStuckRefreshKeepsLeasePastDeadline(t *testing.T) {
	store := memory.NewStore()
	w := &wrap{Backend: memory.NewBackend(store)}
	l, _ := distlock.New(w)
	defer l.Close()
	ls, err := l.TryAcquire(context.Background(), "k", distlock.WithTTL(100*time.Millisecond), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	w.refreshBlock.Store(true)
	go ls.Refresh(context.Background()) // e.g. a partitioned server, no client timeout
	time.Sleep(500 * time.Millisecond)
	if ls.Err() == nil && time.Now().After(ls.Expires()) {
		t.Fatalf("lease still held (Err()==nil, Done open) %v past its local deadline", time.Since(ls.Expires()))
	}
}

// Refresh must not return nil when the lease ended during the call.
func TestLeaseRefreshNilOnEndedLease(t *testing.T) {
	store := memory.NewStore()
	w := &wrap{Backend: memory.NewBackend(store)}
	l, _ := distlock.New(w)
	defer l.Close()
	ls, err := l.TryAcquire(context.Background(), "k", distlock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	w.refreshDelay.Store(int64(150 * time.Millisecond)) // old deadline passes mid-call
	err = ls.Refresh(context.Background())
	if err == nil && ls.Err() != nil {
		t.Fatalf("Refresh returned nil but the lease had ended: Err()=%v", ls.Err())
	}
}

// Do whose release fails must stop renewing, so the key frees at its TTL.
func TestLeaseDoReleaseFailureLeaksRenewingLease(t *testing.T) {
	store := memory.NewStore()
	w := &wrap{Backend: memory.NewBackend(store), keepLost: true}
	l, _ := distlock.New(w)
	defer l.Close()
	err := l.Do(context.Background(), "k", func(ctx context.Context, ls *distlock.Lease) error {
		w.unlockFail.Store(true)
		return nil
	}, distlock.WithTTL(100*time.Millisecond))
	t.Logf("Do: %v", err)
	w.unlockFail.Store(false) // network back
	n := w.refreshes.Load()
	time.Sleep(600 * time.Millisecond) // 6 TTLs after Do returned
	if store.Held("k") {
		t.Fatalf("key still held 6 TTLs after Do returned; %d refreshes since", w.refreshes.Load()-n)
	}
}

// A TTL not above the drift allowance would give a lease born past its
// deadline: it is rejected.
func TestLeaseTTLBelowDriftRejected(t *testing.T) {
	l, _ := memory.New()
	defer l.Close()
	if _, err := l.TryAcquire(context.Background(), "k", distlock.WithTTL(time.Millisecond)); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Fatalf("TTL of 1ms: want ErrInvalidTTL, got %v", err)
	}
}

// A renew interval between the validity and the TTL must still renew in time.
func TestLeaseRenewIntervalAboveValidityLoses(t *testing.T) {
	l, _ := memory.New()
	defer l.Close()
	ls, err := l.TryAcquire(context.Background(), "k", distlock.WithTTL(200*time.Millisecond),
		distlock.WithAutoRenew(true), distlock.WithRenewInterval(199*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ls.Done():
		t.Fatalf("accepted renew interval makes a renewing lease lose: %v", ls.Err())
	case <-time.After(time.Second):
	}
}

// Release (and so Do's bounded release) must honour its ctx while another
// call on the lease is in flight.
func TestLeaseReleaseIgnoresCtxBehindStuckRefresh(t *testing.T) {
	store := memory.NewStore()
	w := &wrap{Backend: memory.NewBackend(store)}
	l, _ := distlock.New(w)
	defer l.Close()
	ls, _ := l.TryAcquire(context.Background(), "k", distlock.WithTTL(time.Minute))
	w.refreshBlock.Store(true)
	go ls.Refresh(context.Background())
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- ls.Release(ctx) }()
	select {
	case err := <-errc:
		t.Logf("Release: %v", err)
	case <-time.After(time.Second):
		t.Fatal("Release with a 100ms ctx still blocked after 1s")
	}
}

// A failed Release ends the lease (it may have freed the lock on the
// server) and stops its renewal, so the key frees at its TTL at the latest
// instead of staying locked while the process lives.
func TestLeaseFailedReleaseStopsRenewal(t *testing.T) {
	store := memory.NewStore()
	w := &wrap{Backend: memory.NewBackend(store), keepLost: true}
	l, _ := distlock.New(w)
	defer l.Close()
	ls, err := l.TryAcquire(context.Background(), "k", distlock.WithTTL(100*time.Millisecond), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	w.unlockFail.Store(true)
	if err := ls.Release(context.Background()); err == nil {
		t.Fatal("Release succeeded through a failing backend")
	}
	// The release may have reached the server: the lease cannot be
	// reported held any more.
	select {
	case <-ls.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the lease kept renewing after its Release failed")
	}
	if !errors.Is(ls.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("after a failed Release, Err = %v, want ErrLeaseLost", ls.Err())
	}
	time.Sleep(200 * time.Millisecond)
	if store.Held("k") {
		t.Fatal("key still held two TTLs after the lease ended")
	}
}

// A refresh to a shorter TTL takes effect when it reaches the server, before
// its answer comes back: while it is on its way (a slow reply, a holder
// paused with it in flight), the lease must not count on its longer
// deadline, or it reports held while another holder has the key.
func TestLeaseShorterRefreshInFlightShortensAtOnce(t *testing.T) {
	store := memory.NewStore()
	w := &wrap{Backend: memory.NewBackend(store)}
	l, _ := distlock.New(w)
	defer l.Close()
	other, _ := distlock.New(memory.NewBackend(store))
	defer other.Close()
	ctx := context.Background()
	ls, err := l.TryAcquire(ctx, "k", distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	w.refreshDelay.Store(int64(time.Second))
	done := make(chan error, 1)
	go func() { done <- ls.Refresh(ctx, distlock.WithTTL(100*time.Millisecond)) }()
	time.Sleep(300 * time.Millisecond) // applied: the lock expired 200 ms ago
	lo, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("the shortened lock did not expire: %v", err)
	}
	defer lo.Release(ctx)
	if ls.Err() == nil && time.Now().Before(ls.Expires()) {
		t.Fatalf("lease reports held with %v left while another holder (token %d) has the key",
			time.Until(ls.Expires()).Round(time.Millisecond), lo.Token())
	}
	<-done
}

// wrappedTTL is a RefreshOption decorated by embedding (a config layer).
type wrappedTTL struct{ distlock.RefreshOption }

// Refresh applies a RefreshOption through its setting, as Acquire does,
// whatever type carries it.
func TestRefreshAppliesWrappedTTL(t *testing.T) {
	l, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.TryAcquire(t.Context(), "k", wrappedTTL{distlock.WithTTL(20 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(t.Context())
	if err := ls.Refresh(t.Context(), wrappedTTL{distlock.WithTTL(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if ls.TTL() != 5*time.Second {
		t.Errorf("Refresh(a wrapped WithTTL(5s)) left the TTL at %v", ls.TTL())
	}
}
