package distlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// sessionBackend: a lock lives until Unlock (like a ZooKeeper session-bound znode).
type sessionBackend struct {
	driver.Unsupported
	mu    sync.Mutex
	owner map[string]string
	tok   int64
}

func (b *sessionBackend) TryLock(_ context.Context, r driver.Request) (driver.Grant, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.owner[r.Key] != "" {
		return driver.Grant{}, &HeldError{Key: r.Key}
	}
	b.owner[r.Key] = r.Owner
	b.tok++
	return driver.Grant{Token: b.tok}, nil
}
func (b *sessionBackend) Refresh(_ context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.owner[g.Key] != g.Owner {
		return 0, ErrNotHeld
	}
	return ttl, nil
}
func (b *sessionBackend) Unlock(_ context.Context, g driver.Grant) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.owner[g.Key] != g.Owner {
		return ErrNotHeld
	}
	delete(b.owner, g.Key)
	return nil
}
func (b *sessionBackend) Inspect(_ context.Context, key string) (driver.Holder, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return driver.Holder{Held: b.owner[key] != "", Waiters: -1}, nil
}
func (b *sessionBackend) Guarantees() driver.Guarantees {
	return driver.Guarantees{Backend: "session", Wait: driver.WaitPoll, SessionTTL: true}
}
func (b *sessionBackend) Close() error { return nil }

// A Refresh that finds the local deadline passed ends the lease as lost and
// must give the lock back: a session-bound lock would otherwise stay held
// for the session's life.
func TestLeaseLateRefreshStrandsLock(t *testing.T) {
	b := &sessionBackend{owner: map[string]string{}}
	l, _ := New(b)
	defer l.Close()
	ls, err := l.TryAcquire(context.Background(), "k", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The process was paused past the deadline (GC, VM stall): model it by
	// moving the portable layer's clock; the expiry timer has not run yet.
	now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	err = ls.Refresh(context.Background())
	now = time.Now
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Refresh: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := l.TryAcquire(context.Background(), "k"); err != nil {
		t.Fatalf("lease is lost (Err=%v) but its lock was never given back: %v", ls.Err(), err)
	}
}
