package redis_test

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
	"github.com/distlock/distlock/redis"
)

// losesReply takes the lock on the server, then reports the reply lost, as
// a timeout racing a landed request does.
type losesReply struct {
	driver.Backend
	lose atomic.Bool
}

func (b *losesReply) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.TryLock(ctx, req)
	if err == nil && b.lose.Load() {
		return driver.Grant{}, errors.New("i/o timeout (the reply was lost)")
	}
	return g, err
}

// A review found a key stranded for its whole TTL after a burst of
// abandoned attempts: each give-back that found nothing asked again for the
// release timeout (5s), the cap of 64 give-backs under way filled up, and
// the give-back of the one attempt that had landed was dropped. The
// tombstone makes one call enough, so the slots free at once.
func TestGiveBackAfterBurstOfAbandonedAttempts(t *testing.T) {
	srv := testserver.Redis(t)
	raw, err := redis.NewBackend(newClient(t, srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
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
		if _, err := l.TryAcquire(cancelled, fmt.Sprintf("burst-%d", i)); err == nil {
			t.Fatal("TryAcquire with a cancelled context succeeded")
		}
	}
	time.Sleep(200 * time.Millisecond) // the burst's give-backs have each made their call
	b.lose.Store(true)
	if _, err := l.TryAcquire(t.Context(), "k", distlock.WithTTL(time.Minute)); err == nil {
		t.Fatal("the lost reply was reported as a grant")
	}
	other := newLocker(t, srv.Addr())
	deadline := time.Now().Add(3 * time.Second)
	for {
		ls, err := other.TryAcquire(t.Context(), "k", distlock.WithTTL(time.Minute))
		if err == nil {
			_ = ls.Release(t.Context())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the landed attempt was not given back within 3s (TTL 1m): %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
