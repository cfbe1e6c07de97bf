package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memory"
)

type errBackend struct {
	driver.Backend
	err   func() error
	calls atomic.Int64
}

func (b *errBackend) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	b.calls.Add(1)
	return driver.Grant{}, b.err()
}

func (b *errBackend) Guarantees() driver.Guarantees {
	g := b.Backend.Guarantees()
	g.Wait = driver.WaitPoll
	return g
}

// Errors that are answers (a TLS alert, an unknown host, our own closed
// client) end a waiting Acquire at once: they are not retried until ctx ends.
func TestAnswersAreNotRetried(t *testing.T) {
	cases := map[string]error{
		"tls alert (server rejected client cert)": &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")},
		"dns not found":                 &net.DNSError{Err: "no such host", Name: "nosuch.invalid", IsNotFound: true},
		"client closed (net.ErrClosed)": fmt.Errorf("pool: %w", net.ErrClosed),
	}
	for name, e := range cases {
		b := &errBackend{Backend: memory.NewBackend(memory.NewStore()), err: func() error { return e }}
		l, err := distlock.New(b)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		_, err = l.Acquire(ctx, "k")
		cancel()
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: permanent error retried %d times for %v (until ctx ended): %v", name, b.calls.Load(), d.Round(time.Millisecond), err)
		}
		l.Close()
	}
}

// A per-attempt timeout reported as ErrUnavailable (wrapping
// DeadlineExceeded) stays in the error once the caller's ctx ends.
func TestLastUnavailableErrorKept(t *testing.T) {
	e := fmt.Errorf("%w: node 127.0.0.1:1: %w", driver.ErrUnavailable, context.DeadlineExceeded)
	b := &errBackend{Backend: memory.NewBackend(memory.NewStore()), err: func() error { return e }}
	l, _ := distlock.New(b)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(ctx, "k")
	t.Logf("err=%v calls=%d", err, b.calls.Load())
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("missing ErrNotAcquired/DeadlineExceeded: %v", err)
	}
	if !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("last error (ErrUnavailable) dropped: %v", err)
	}
}

// Close ends a deadline-less waiting Acquire stuck on transient errors; no leak.
func TestCloseEndsRetry(t *testing.T) {
	before := runtime.NumGoroutine()
	b := &errBackend{Backend: memory.NewBackend(memory.NewStore()), err: func() error { return fmt.Errorf("x: %w", driver.ErrUnavailable) }}
	l, _ := distlock.New(b, distlock.WithReleaseTimeout(200*time.Millisecond))
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(context.Background(), "k"); done <- err }()
	time.Sleep(300 * time.Millisecond)
	n := b.calls.Load()
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("err %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Acquire did not end after Close")
	}
	if n > 200 {
		t.Errorf("hot loop: %d attempts in 300ms", n)
	}
	time.Sleep(100 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+1 {
		t.Errorf("goroutines %d -> %d", before, after)
	}
}

// An access-denied answer is not an outage: a waiting Acquire must not
// retry it as one, nor call it ErrUnavailable.
func TestAccessDeniedIsNotTransient(t *testing.T) {
	err := driver.AccessDenied("127.0.0.1:6379", errors.New("WRONGPASS invalid username-password pair"))
	if !errors.Is(err, distlock.ErrAccessDenied) || errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("%v: want ErrAccessDenied and not ErrUnavailable", err)
	}
	l, err := distlock.New(&denying{Backend: memory.NewBackend(memory.NewStore())})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	_, err = l.Acquire(ctx, "k")
	if !errors.Is(err, distlock.ErrAccessDenied) || errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Acquire: %v, want ErrAccessDenied", err)
	}
	if d := time.Since(began); d > time.Second {
		t.Fatalf("Acquire took %v: an access-denied answer was retried", d)
	}
}

// denying refuses every attempt as a server with a wrong password would.
type denying struct{ driver.Backend }

func (d *denying) TryLock(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{}, driver.AccessDenied("127.0.0.1:1", errors.New("WRONGPASS"))
}

// An attempt error that says both "held" (by the nodes that answered) and
// "unavailable" (the others) is retried as an outage; when ctx ends during
// its back-off, the server's error stays in the one returned.
func TestHeldAndUnavailableKeptAtCtxEnd(t *testing.T) {
	e := fmt.Errorf("%w: 1 node out of reach: %w", distlock.ErrUnavailable, &distlock.HeldError{Key: "k"})
	b := &errBackend{Backend: memory.NewBackend(memory.NewStore()), err: func() error { return e }}
	l, err := distlock.New(b, distlock.WithBackoff(50*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(ctx, "k")
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Acquire = %v; want ErrNotAcquired, the deadline and the last ErrUnavailable", err)
	}
}
