package distlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/memory"
)

func newMem(t *testing.T, store *memory.Store, opts ...distlock.Option) distlock.Locker {
	t.Helper()
	l, err := memory.New(append([]distlock.Option{memory.WithStore(store)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestNewRejectsBadInput(t *testing.T) {
	if _, err := distlock.New(nil); !errors.Is(err, distlock.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	b := memory.NewBackend(memory.NewStore())
	for name, opt := range map[string]distlock.Option{
		"backoff min 0":        distlock.WithBackoff(0, time.Second),
		"backoff max < min":    distlock.WithBackoff(time.Second, time.Millisecond),
		"negative renew":       distlock.WithRenewInterval(-time.Second),
		"drift factor":         distlock.WithDrift(0.9, 0),
		"release timeout zero": distlock.WithReleaseTimeout(0),
		"nil store":            memory.WithStore(nil),
	} {
		if _, err := distlock.New(b, opt); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: want ErrInvalidOption, got %v", name, err)
		}
	}
	if _, err := distlock.New(b, distlock.WithTTL(-time.Second)); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Errorf("negative default TTL: %v", err)
	}
	// A bad option on a call fails that call only.
	l := newMem(t, memory.NewStore())
	if _, err := l.TryAcquire(context.Background(), "k", distlock.WithBackoff(0, 0)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("bad call option: %v", err)
	}
	if _, err := l.TryAcquire(context.Background(), "k"); err != nil {
		t.Errorf("the Locker should still work: %v", err)
	}
}

func TestNilContext(t *testing.T) {
	l := newMem(t, memory.NewStore())
	var nilCtx context.Context
	if _, err := l.Acquire(nilCtx, "k"); !errors.Is(err, distlock.ErrInvalid) {
		t.Errorf("Acquire(nil ctx): %v", err)
	}
	ls, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Refresh(nilCtx); !errors.Is(err, distlock.ErrInvalid) {
		t.Errorf("Refresh(nil ctx): %v", err)
	}
	if err := ls.Release(nilCtx); !errors.Is(err, distlock.ErrInvalid) {
		t.Errorf("Release(nil ctx): %v", err)
	}
	if _, err := distlock.Open(nilCtx, "mem://"); !errors.Is(err, distlock.ErrInvalid) {
		t.Errorf("Open(nil ctx): %v", err)
	}
}

type recorder struct {
	mu     sync.Mutex
	events []distlock.Event
}

func (r *recorder) Observe(_ context.Context, e distlock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) count(k distlock.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == k {
			n++
			if e.Backend != "memory" {
				panic("event without backend name")
			}
		}
	}
	return n
}

func TestObserverSeesTheLifecycle(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	rec := &recorder{}
	l := newMem(t, store, distlock.WithObserver(rec))
	other := newMem(t, store)

	held, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { held.Release(ctx) })
	ls, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lost, err := l.TryAcquire(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	store.ForceExpire("k2")
	<-lost.Done()
	if _, err := l.TryAcquire(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "k"); err == nil {
		t.Fatal("second TryAcquire succeeded")
	}
	for kind, min := range map[distlock.EventKind]int{
		distlock.EventAcquired: 3, distlock.EventContended: 1, distlock.EventRefreshed: 1,
		distlock.EventReleased: 1, distlock.EventLost: 1, distlock.EventAcquireFailed: 1,
	} {
		if n := rec.count(kind); n < min {
			t.Errorf("%s events: %d, want at least %d", kind, n, min)
		}
	}
}

func TestLoggerReportsLoss(t *testing.T) {
	var buf testutil.SyncBuffer
	store := memory.NewStore()
	l := newMem(t, store, distlock.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ls, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	store.ForceExpire("k")
	<-ls.Done()
	if !errors.Is(ls.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("Err = %v", ls.Err())
	}
	if s := buf.String(); !strings.Contains(s, "lease lost") || !strings.Contains(s, "key=k") {
		t.Fatalf("log does not report the loss:\n%s", s)
	}
}

// pollOnly hides the memory backend's notices and counts attempts.
type pollOnly struct {
	driver.Unsupported
	b        driver.Backend
	attempts atomic.Int64
	wait     driver.WaitMode // declared; WaitPoll when empty
}

func (p *pollOnly) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	p.attempts.Add(1)
	return p.b.TryLock(ctx, r)
}
func (p *pollOnly) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	return p.b.Refresh(ctx, g, ttl)
}
func (p *pollOnly) Unlock(ctx context.Context, g driver.Grant) error { return p.b.Unlock(ctx, g) }
func (p *pollOnly) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	return p.b.Inspect(ctx, key)
}
func (p *pollOnly) Guarantees() driver.Guarantees {
	g := p.b.Guarantees()
	g.Wait = driver.WaitPoll
	if p.wait != "" {
		g.Wait = p.wait
	}
	return g
}
func (p *pollOnly) Close() error { return p.b.Close() }

// TestPollingBacksOff: without a native wait the portable layer backs off
// exponentially rather than spinning, and still gets the key once free.
func TestPollingBacksOff(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	holder := newMem(t, store)
	pb := &pollOnly{b: memory.NewBackend(store)}
	waiter, err := distlock.New(pb, distlock.WithBackoff(time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	held, err := holder.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = waiter.Acquire(wctx, "k")
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrNotAcquired+DeadlineExceeded, got %v", err)
	}
	// A 1 ms fixed spin would make ~1000 attempts in a second; back-off
	// capped at 50 ms (mean ~25 ms) makes a few dozen.
	if n := pb.attempts.Load(); n > 150 || n < 3 {
		t.Fatalf("%d attempts in one second of waiting: not an exponential back-off", n)
	}
	time.AfterFunc(30*time.Millisecond, func() { held.Release(ctx) })
	ls, err := waiter.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	ls.Release(ctx)
}

// deafNotifier subscribes successfully but never delivers a notice.
type deafNotifier struct{ pollOnly }

type deafSub struct{}

func (deafSub) Wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (deafSub) Close() error                   { return nil }

func (d *deafNotifier) Subscribe(context.Context, string) (driver.Subscription, error) {
	return deafSub{}, nil
}

// TestLostNoticeDoesNotStrand: when notices never come, the waiter still
// gets the key once the holder's TTL runs out (fallback bounded by it).
func TestLostNoticeDoesNotStrand(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	holder := newMem(t, store)
	d := &deafNotifier{pollOnly{b: memory.NewBackend(store), wait: driver.WaitNotify}}
	waiter, err := distlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	if _, err := holder.TryAcquire(ctx, "k", distlock.WithTTL(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ls, err := waiter.Acquire(wctx, "k")
	if err != nil {
		t.Fatalf("waiter stranded: %v", err)
	}
	ls.Release(ctx)
	if n := d.attempts.Load(); n > 5 {
		t.Fatalf("%d attempts: the fallback should wait for the holder's TTL, not poll", n)
	}
}

// TestCloseRacesWithUse: Close while many goroutines acquire, refresh and
// release must not panic, race, deadlock or leave a lock behind.
func TestCloseRacesWithUse(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	for round := 0; round < 20; round++ {
		l, err := memory.New(memory.WithStore(store), distlock.WithAutoRenew(true), distlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					ls, err := l.Acquire(ctx, "k")
					if err != nil {
						if !errors.Is(err, distlock.ErrClosed) {
							t.Errorf("Acquire: %v", err)
						}
						return
					}
					_ = ls.Refresh(ctx)
					_ = ls.Release(ctx)
				}
			}()
		}
		time.Sleep(time.Duration(round) * 100 * time.Microsecond)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if store.Held("k") {
			t.Fatalf("round %d: Close left the key held", round)
		}
	}
}

func TestErrorShapes(t *testing.T) {
	held := &distlock.HeldError{Key: "k", RetryAfter: time.Second}
	if !errors.Is(held, distlock.ErrNotAcquired) || !strings.Contains(held.Error(), "1s") {
		t.Errorf("HeldError: %v", held)
	}
	for _, e := range []error{distlock.ErrInvalidKey, distlock.ErrInvalidTTL, distlock.ErrInvalidOption, distlock.ErrInvalidURL} {
		if !errors.Is(e, distlock.ErrInvalid) {
			t.Errorf("%v does not match ErrInvalid", e)
		}
	}
	if errors.Is(distlock.ErrInvalidKey, distlock.ErrInvalidTTL) {
		t.Error("ErrInvalidKey matches ErrInvalidTTL")
	}
	if distlock.Token(42).String() != "42" {
		t.Error("Token.String")
	}
}

func TestAs(t *testing.T) {
	store := memory.NewStore()
	l := newMem(t, store)
	var got *memory.Store
	if !distlock.As(l, &got) || got != store {
		t.Fatal("As did not reach the store")
	}
	var wrong *int
	if distlock.As(l, &wrong) {
		t.Fatal("As matched a wrong type")
	}
}

// brokenSub fails its first Wait with a server error, as a pub/sub
// connection that drops would.
type brokenSub struct{}

func (brokenSub) Wait(context.Context) error { return errors.New("connection reset") }
func (brokenSub) Close() error               { return nil }

type brokenNotifier struct{ pollOnly }

func (b *brokenNotifier) Subscribe(context.Context, string) (driver.Subscription, error) {
	return brokenSub{}, nil
}

// TestFailedSubscriptionFallsBackToPolling: a subscription that breaks is
// dropped and the wait goes on by polling (this once panicked on the
// deferred Close of the dropped subscription).
func TestFailedSubscriptionFallsBackToPolling(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	holder := newMem(t, store)
	b := &brokenNotifier{pollOnly{b: memory.NewBackend(store), wait: driver.WaitNotify}}
	waiter, err := distlock.New(b, distlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	held, err := holder.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { held.Release(ctx) })
	ls, err := waiter.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	ls.Release(ctx)
}
