package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memory"
)

// harnessOn builds a harness whose Lockers run on wrap(memory backend):
// with wrap = identity it is the reference backend, otherwise a broken one.
func harnessOn(wrap func(driver.Backend, *memory.Store) driver.Backend) conformance.Harness {
	return harnessOfLockers(wrap, func(l distlock.Locker) distlock.Locker { return l })
}

// harnessOfLockers is harnessOn whose Lockers are also wrapped, by
// wrapLocker: rules the portable layer keeps (Watch's) are broken there.
func harnessOfLockers(wrap func(driver.Backend, *memory.Store) driver.Backend, wrapLocker func(distlock.Locker) distlock.Locker) conformance.Harness {
	store := memory.NewStore()
	// The broken layer sits above the crash switch, so it answers after a
	// crash as a broken client would.
	broken := func(c driver.Backend) driver.Backend { return wrap(c, store) }
	return conformance.WithWrappers(conformance.Harness{
		NewBackend: func(context.Context) (driver.Backend, error) { return memory.NewBackend(store), nil },
		ForceExpire: func(_ context.Context, key string) error {
			if !store.ForceExpire(key) {
				return fmt.Errorf("key %q is not held", key)
			}
			return nil
		},
		TTL:        200 * time.Millisecond,
		Contenders: 6,
		Rounds:     15,
	}, broken, wrapLocker)
}

// noExclusion grants every attempt, held key or not.
type noExclusion struct {
	driver.Backend
	tokens atomic.Int64
}

func (b *noExclusion) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return driver.Grant{Token: b.tokens.Add(1)}, nil
}
func (b *noExclusion) Refresh(context.Context, driver.Grant, time.Duration) (time.Duration, error) {
	return 0, nil
}
func (b *noExclusion) Unlock(context.Context, driver.Grant) error { return nil }

// anyoneReleases deletes the key on Unlock whoever holds it.
type anyoneReleases struct {
	driver.Backend
	store *memory.Store
}

// TryLock hides the memory backend's loss notice: a stale holder that
// learned of its loss before Release would return ErrNotHeld without a
// round trip, and the broken Unlock would go untested.
func (b *anyoneReleases) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.TryLock(ctx, req)
	g.Lost = nil
	return g, err
}

func (b *anyoneReleases) Unlock(_ context.Context, g driver.Grant) error {
	if !b.store.ForceExpire(g.Key) {
		return distlock.ErrNotHeld
	}
	return nil
}

// constantToken hands every holder token 1.
type constantToken struct{ driver.Backend }

func (b constantToken) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.TryLock(ctx, req)
	g.Token = 1
	return g, err
}

// neverExpires ignores the TTL: locks last a day on the server.
type neverExpires struct{ driver.Backend }

func (b neverExpires) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	ttl := req.TTL
	req.TTL = distlock.MaxTTL
	g, err := b.Backend.TryLock(ctx, req)
	g.Validity = ttl // claims the TTL it was asked for
	g.Lost = nil
	return g, err
}
func (b neverExpires) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	_, err := b.Backend.Refresh(ctx, g, distlock.MaxTTL)
	return ttl, err
}

// doneNeverCloses never reports a loss: refresh always "succeeds" and the
// server's loss signal is dropped.
type doneNeverCloses struct{ driver.Backend }

func (b doneNeverCloses) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.TryLock(ctx, req)
	g.Lost = nil
	return g, err
}
func (b doneNeverCloses) Refresh(_ context.Context, _ driver.Grant, ttl time.Duration) (time.Duration, error) {
	return ttl, nil
}

// refreshDoesNothing accepts refreshes without extending the lock.
type refreshDoesNothing struct{ driver.Backend }

func (b refreshDoesNothing) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.TryLock(ctx, req)
	g.Lost = nil // a client that cannot hear the server expire it
	return g, err
}
func (b refreshDoesNothing) Refresh(_ context.Context, _ driver.Grant, ttl time.Duration) (time.Duration, error) {
	return ttl, nil
}

// orphans is a queue's leftover entries, shared by the Lockers of a harness.
type orphans struct {
	mu   sync.Mutex
	keys map[string]bool
}

// leavesResidue is a queue backend whose waiter forgets to
// delete its queue entry when its context ends, blocking every later
// attempt on the key.
type leavesResidue struct {
	driver.Backend
	left *orphans
}

func (b *leavesResidue) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	b.left.mu.Lock()
	orphan := b.left.keys[req.Key]
	b.left.mu.Unlock()
	if orphan {
		return driver.Grant{}, &distlock.HeldError{Key: req.Key}
	}
	return b.Backend.TryLock(ctx, req)
}

// Guarantees declares the server-side queue, so Acquire waits in Lock.
func (b *leavesResidue) Guarantees() driver.Guarantees {
	g := b.Backend.Guarantees()
	g.Wait = driver.WaitQueue
	return g
}

func (b *leavesResidue) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	for {
		g, err := b.TryLock(ctx, req)
		if err != nil && ctx.Err() != nil {
			// Given up while waiting, whichever call saw ctx end (a
			// loaded machine can wake the sleep and the end together).
			b.left.mu.Lock()
			b.left.keys[req.Key] = true // the bug: the entry stays
			b.left.mu.Unlock()
			return driver.Grant{}, ctx.Err()
		}
		if !errors.Is(err, distlock.ErrNotAcquired) {
			return g, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond): // a test double; real backends wait on the server
		}
	}
}

func TestReferencePasses(t *testing.T) {
	conformance.Run(t, harnessOn(func(b driver.Backend, _ *memory.Store) driver.Backend { return b }))
}

// TestBrokenLockersFail checks that the suite catches each broken rule, and
// catches it in the case named for that rule.
func TestBrokenLockersFail(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(driver.Backend, *memory.Store) driver.Backend
		want string // the case that must fail
		// ttl, if set, replaces the harness's 200ms: a double that only
		// fakes renewals would pass by a renewal late on a loaded machine.
		ttl time.Duration
	}{
		{"no mutual exclusion", func(b driver.Backend, _ *memory.Store) driver.Backend { return &noExclusion{Backend: b} }, "MutualExclusion", 0},
		{"no mutual exclusion (try)", func(b driver.Backend, _ *memory.Store) driver.Backend { return &noExclusion{Backend: b} }, "TryAcquireHeld", 0},
		{"release by non-owner", func(b driver.Backend, s *memory.Store) driver.Backend { return &anyoneReleases{b, s} }, "StaleReleaseKeepsNewHolder", 0},
		{"tokens not increasing", func(b driver.Backend, _ *memory.Store) driver.Backend { return constantToken{b} }, "TokensIncrease", 0},
		{"tokens not increasing after expiry", func(b driver.Backend, _ *memory.Store) driver.Backend { return constantToken{b} }, "TokensIncreaseAfterExpiry", 0},
		{"never expires", func(b driver.Backend, _ *memory.Store) driver.Backend { return neverExpires{b} }, "CrashFreesAfterTTL", 0},
		{"Done never closes", func(b driver.Backend, _ *memory.Store) driver.Backend { return doneNeverCloses{b} }, "ForcedExpiryEndsDone", 2 * time.Second},
		{"Do not cancelled on loss", func(b driver.Backend, _ *memory.Store) driver.Backend { return doneNeverCloses{b} }, "DoCancelsOnLoss", 2 * time.Second},
		{"refresh does not extend", func(b driver.Backend, _ *memory.Store) driver.Backend { return refreshDoesNothing{b} }, "RefreshExtends", 0},
		{"Inspect reports a stale value", func() func(driver.Backend, *memory.Store) driver.Backend {
			left := &leftovers{last: map[string]string{}} // on the "server": shared by the Lockers
			return func(b driver.Backend, _ *memory.Store) driver.Backend { return staleValue{b, left} }
		}(), "InspectNewHolder", 0},
		{"Inspect reports a wrong token", func(b driver.Backend, _ *memory.Store) driver.Backend { return offByOneToken{b} }, "InspectHolder", 0},
		{"Inspect misses the end of a lock", func(b driver.Backend, _ *memory.Store) driver.Backend { return &stickyHolder{Backend: b} }, "InspectAfterCrash", 0},
		{"Inspect truncates values", func(b driver.Backend, _ *memory.Store) driver.Backend { return truncatesValue{b} }, "InspectValueBounds", 0},
		{"Inspect counts no waiters", func(b driver.Backend, _ *memory.Store) driver.Backend { return &queueOnly{Backend: b} }, "InspectWaiters", 0},
		{"Watch never notifies", func(b driver.Backend, _ *memory.Store) driver.Backend { return silentWatch{b} }, "WatchSeesChanges", 0},
		{"two leaders", func(b driver.Backend, _ *memory.Store) driver.Backend { return &noExclusion{Backend: b} }, "ElectionOneLeader", 0},
		{"observer misses leaders", func(b driver.Backend, _ *memory.Store) driver.Backend { return &stickyHolder{Backend: b} }, "ElectionObserversSeeEveryLeader", 0},
		{"hand-over without a larger token", func(b driver.Backend, _ *memory.Store) driver.Backend { return constantToken{b} }, "ElectionResignHandsOver", 0},
		{"paused leader keeps its term", func(b driver.Backend, _ *memory.Store) driver.Backend { return doneNeverCloses{b} }, "ElectionPausedLeaderReplaced", 2 * time.Second},
		{"FIFO claimed, newest waiter served first", func() func(driver.Backend, *memory.Store) driver.Backend {
			waiting := &waitStacks{keys: map[string][]string{}}
			return func(b driver.Backend, _ *memory.Store) driver.Backend { return lastComeFirst{b, waiting} }
		}(), "FIFOHandOff", 0},
		{"waiter leaves residue", func() func(driver.Backend, *memory.Store) driver.Backend {
			left := &orphans{keys: map[string]bool{}}
			return func(b driver.Backend, _ *memory.Store) driver.Backend { return &leavesResidue{b, left} }
		}(), "CancelLeavesNoResidue", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := harnessOn(tc.wrap)
			if tc.ttl > 0 {
				h.TTL = tc.ttl
			}
			mustCatch(t, h, tc.want)
		})
	}
}

// TestBrokenWatchFails: the rules Watch keeps in the portable layer hold
// whatever the backend reports, so the Lockers that break them are broken
// above it.
func TestBrokenWatchFails(t *testing.T) {
	same := func(b driver.Backend, _ *memory.Store) driver.Backend { return b }
	for _, tc := range []struct {
		name   string
		locker func(distlock.Locker) distlock.Locker
		want   string
	}{
		{"Watch reports an older holder again", func(l distlock.Locker) distlock.Locker { return replaysHolder{l} }, "WatchTokensIncrease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mustCatch(t, harnessOfLockers(same, tc.locker), tc.want)
		})
	}
}

// mustCatch checks that the case named want fails on h, and is the one
// the failure names.
func mustCatch(t *testing.T, h conformance.Harness, want string) {
	t.Helper()
	c := findCase(t, want)
	err := c.Check(t.Context(), h)
	var ce *conformance.CaseError
	if !errors.As(err, &ce) {
		t.Fatalf("case %s passed (or skipped: %v) on a locker that breaks its rule", want, err)
	}
	if ce.Case != want || ce.Rule != c.Rule {
		t.Fatalf("failure attributed to %q, want %q", ce.Case, want)
	}
	t.Logf("caught as expected: %v", err)
}

// replaysHolder is a Locker whose Watch reports, after each new holder,
// the one before it again: what a watch that trusts a server restarted
// from an older snapshot shows.
type replaysHolder struct{ distlock.Locker }

func (l replaysHolder) Watch(ctx context.Context, key string, opts ...distlock.CallOption) (<-chan distlock.Holder, error) {
	in, err := l.Locker.Watch(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan distlock.Holder)
	go func() {
		defer close(out)
		var prev distlock.Holder
		for h := range in {
			send := []distlock.Holder{h}
			if h.Held && prev.Held {
				send = append(send, prev)
			}
			if h.Held {
				prev = h
			}
			for _, s := range send {
				select {
				case out <- s:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

func findCase(t *testing.T, name string) conformance.Case {
	t.Helper()
	for _, c := range conformance.Cases() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case named %q", name)
	return conformance.Case{}
}

// TestSuiteShape keeps the suite honest: enough named rules, each explained.
func TestSuiteShape(t *testing.T) {
	cs := conformance.Cases()
	if len(cs) < 20 {
		t.Fatalf("%d cases; the suite promises at least 20", len(cs))
	}
	seen := map[string]bool{}
	for _, c := range cs {
		if c.Name == "" || c.Rule == "" {
			t.Errorf("case %q has no name or rule", c.Name)
		}
		if seen[c.Name] {
			t.Errorf("duplicate case %q", c.Name)
		}
		seen[c.Name] = true
	}
}

// TestCheckReportsAll: Check returns every broken rule, each a *CaseError.
func TestCheckReportsAll(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite")
	}
	err := conformance.Check(t.Context(), harnessOn(func(b driver.Backend, _ *memory.Store) driver.Backend { return constantToken{b} }))
	if err == nil {
		t.Fatal("Check passed a locker with constant tokens")
	}
	var ce *conformance.CaseError
	if !errors.As(err, &ce) {
		t.Fatalf("Check error is not a *CaseError: %v", err)
	}
	if err := conformance.Check(t.Context(), conformance.Harness{}); err == nil {
		t.Fatal("Check passed a harness with no NewBackend")
	}
}

func TestMissingCapabilitiesSkip(t *testing.T) {
	h := harnessOn(func(b driver.Backend, _ *memory.Store) driver.Backend { return b })
	h.ForceExpire = nil
	for _, name := range []string{"ForcedExpiryEndsDone", "StaleReleaseKeepsNewHolder"} {
		err := findCase(t, name).Check(t.Context(), h)
		var skip *conformance.SkipError
		if !errors.As(err, &skip) {
			t.Errorf("%s without the capability: want a skip, got %v", name, err)
		}
	}
}

// queueOnly is a queue backend over the memory backend, to check that Crashable
// keeps a queue backend's Lock in use.
type queueOnly struct {
	driver.Backend
	locks atomic.Int64
}

func (q *queueOnly) Guarantees() driver.Guarantees {
	g := q.Backend.Guarantees()
	g.Wait = driver.WaitQueue
	return g
}

func (q *queueOnly) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	q.locks.Add(1)
	for {
		g, err := q.Backend.TryLock(ctx, req)
		if !errors.Is(err, distlock.ErrNotAcquired) {
			return g, err
		}
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func TestCrashableKeepsQueue(t *testing.T) {
	q := &queueOnly{Backend: memory.NewBackend(memory.NewStore())}
	c := &conformance.Crashable{Backend: q}
	l, err := distlock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.Acquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if q.locks.Load() != 1 {
		t.Fatalf("Acquire did not go through the wrapped Lock (%d calls)", q.locks.Load())
	}
	c.Crash()
	if _, err := l.Acquire(t.Context(), "other"); !errors.Is(err, conformance.ErrCrashed) {
		t.Fatalf("Acquire after Crash: %v", err)
	}
	_ = ls
}
