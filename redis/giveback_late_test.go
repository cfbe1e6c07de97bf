package redis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// split sends TryLock over one connection path (through the proxy) and
// everything else (the give-back's Unlock) over another: a timed-out
// connection is discarded by go-redis, so the give-back always travels on a
// different TCP connection than the attempt it gives back.
type split struct {
	driver.Backend                // direct
	try            driver.Backend // through the proxy
	unlocks        atomic.Int32
	unlockNil      atomic.Int32
}

func (s *split) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return s.try.TryLock(ctx, req)
}

func (s *split) Unlock(ctx context.Context, g driver.Grant) error {
	err := s.Backend.Unlock(ctx, g)
	if g.Handle == nil {
		s.unlocks.Add(1)
		if err == nil {
			s.unlockNil.Add(1)
		}
	}
	return err
}

// One give-back must cover an attempt whose request is still on its way:
// an acquire delayed past the attempt's TTL (a retransmitted segment, a
// congested link) once landed after a TTL-long tombstone expired and took
// the key for nobody for a whole TTL: the tombstone of a give-back outlives
// the TTL by the default release timeout.
func TestGiveBackCoversALateAcquire(t *testing.T) {
	srv := testserver.Redis(t)
	const ttl = time.Second
	const delay = 1500 * time.Millisecond
	px := testutil.NewDelayProxy(t, srv.Addr(), delay)
	direct, err := redis.NewBackend(newClient(t, srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	proxied, err := redis.NewBackend(newClient(t, px.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	b := &split{Backend: direct, try: proxied}
	l, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	// Warm up: the acquire script is loaded, the pool has a connection.
	ls, err := l.TryAcquire(ctx, "warm", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(ctx)

	px.Slow.Store(true)
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	t0 := time.Now()
	_, err = l.TryAcquire(actx, "k", distlock.WithTTL(ttl))
	cancel()
	px.Slow.Store(false)
	if err == nil {
		t.Fatal("the delayed attempt succeeded")
	}
	t.Logf("attempt failed after %v: %v", time.Since(t0), err)

	other := newLocker(t, srv.Addr())
	var firstHeld, lastHeld time.Duration
	for time.Since(t0) < delay+ttl+time.Second {
		o, err := other.TryAcquire(ctx, "k", distlock.WithTTL(ttl))
		if err == nil {
			_ = o.Release(ctx)
		} else {
			if firstHeld == 0 {
				firstHeld = time.Since(t0)
			}
			lastHeld = time.Since(t0)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("give-backs: %d calls, %d returned nil", b.unlocks.Load(), b.unlockNil.Load())
	if firstHeld != 0 {
		t.Fatalf("after the give-back returned nil, the abandoned attempt held %q from %v to %v after it began (%v; TTL %v, acquire delayed %v)",
			"k", firstHeld, lastHeld, lastHeld-firstHeld, ttl, delay)
	}
}
