package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// A node that refuses connections is named with its cause, and a failure
// the library's own timeouts cut off does not match the caller's ctx
// errors while that ctx is live.
func TestErrorsNameTheirCause(t *testing.T) {
	a, b := testserver.Redis(t), testserver.Redis(t)
	ctx := t.Context()

	t.Run("Open with a majority refused", func(t *testing.T) {
		_, err := distlock.Open(ctx, "redlock://127.0.0.1:1,127.0.0.2:1,"+a.Addr()+"?dial_timeout=300ms")
		switch {
		case err == nil:
			t.Fatal("Open succeeded with two of three nodes refusing")
		case !errors.Is(err, distlock.ErrUnavailable):
			t.Errorf("Open: %v; want ErrUnavailable", err)
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("Open: %v matches context.DeadlineExceeded while the caller's ctx is live", err)
		case !strings.Contains(err.Error(), "connection refused"):
			t.Errorf("Open: %v; want the nodes' cause, connection refused", err)
		}
	})

	l := open(t, "redlock://"+a.Addr()+","+b.Addr()+",127.0.0.1:1")
	other := open(t, "redlock://"+a.Addr()+","+b.Addr()+",127.0.0.1:1")
	t.Run("busy key on a healthy majority", func(t *testing.T) {
		ls, err := l.TryAcquire(ctx, "busy", distlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer ls.Release(ctx)
		_, err = other.TryAcquire(ctx, "busy")
		if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held key: %v; want ErrNotAcquired", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "held by another owner on 2 of 3 nodes") || strings.Contains(msg, "not heard from") {
			t.Errorf("TryAcquire of a held key: %q; want it reported as contention, not as a fault", msg)
		}
	})

	t.Run("a majority down", func(t *testing.T) {
		b.Kill()
		_, err := l.TryAcquire(ctx, "down")
		switch {
		case err == nil:
			t.Fatal("TryAcquire succeeded on one node of three")
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("TryAcquire: %v matches context.DeadlineExceeded while the caller's ctx is live", err)
		case !strings.Contains(err.Error(), "connection refused"):
			t.Errorf("TryAcquire: %v; want the down nodes' cause, connection refused", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := l.Acquire(cctx, "down"); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire with a cancelled ctx: %v; want context.Canceled", err)
		}
	})
}

// open opens u, closed with the test.
func open(t *testing.T, u string) distlock.Locker {
	t.Helper()
	l, err := distlock.Open(t.Context(), u)
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
