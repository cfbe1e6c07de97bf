package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Harness connects the suite to a backend.
type Harness struct {
	// NewBackend returns a new backend — its own client or session — on
	// the server shared by every backend of this harness. The suite makes
	// a Locker of each, over a switch that crashes it. Required.
	NewBackend func(ctx context.Context) (driver.Backend, error)

	// Crash stops what else a crashed process would stop, once the suite
	// has made every call of b fail: a session's connection (ZooKeeper),
	// keep-alives the backend sends by itself. The server must keep b's
	// locks until they expire. Nil: nothing else.
	Crash func(ctx context.Context, b driver.Backend) error

	// ForceExpire ends key's lock on the server, as an expiry, a lost
	// session or a clock jump would. Nil skips the forced-expiry cases.
	ForceExpire func(ctx context.Context, key string) error

	// TTL is the short TTL of the expiry cases; it must be one the backend
	// honours (session-bound backends: the session timeout). Default 500ms.
	TTL time.Duration

	// Contenders × Rounds size the mutual-exclusion case (default 8 × 25).
	Contenders, Rounds int

	// For the suite's own tests (export_test.go): wrapBackend breaks the
	// backend above the crash switch (a broken client answers even when
	// its calls would not arrive), wrapLocker breaks the Locker above the
	// portable layer.
	wrapBackend func(driver.Backend) driver.Backend
	wrapLocker  func(distlock.Locker) distlock.Locker
}

func (h Harness) withDefaults() Harness {
	if h.TTL <= 0 {
		h.TTL = 500 * time.Millisecond
	}
	if h.Contenders <= 0 {
		h.Contenders = 8
	}
	if h.Rounds <= 0 {
		h.Rounds = 25
	}
	return h
}

// Case is one rule of the contract and the check that enforces it.
type Case struct {
	Name string // e.g. "MutualExclusion"
	Rule string // the rule, in one line
	run  func(e *env)
}

// CaseError is a broken rule: which case, the rule, and what went wrong.
type CaseError struct {
	Case, Rule string
	Err        error
}

// Error names the case, what went wrong and the rule.
func (e *CaseError) Error() string {
	return fmt.Sprintf("%s: %v\n\trule: %s", e.Case, e.Err, e.Rule)
}

// Unwrap returns what went wrong.
func (e *CaseError) Unwrap() error { return e.Err }

// SkipError says why a case did not run.
type SkipError struct{ Case, Reason string }

// Error names the case and why it was skipped.
func (e *SkipError) Error() string { return e.Case + " skipped: " + e.Reason }

// Cases returns the suite's cases in order.
func Cases() []Case { return append([]Case(nil), cases...) }

// Check runs every case and returns their errors joined (each a *CaseError),
// or nil if the backend passes. Skipped cases are not errors.
func Check(ctx context.Context, h Harness) error {
	var errs []error
	for _, c := range cases {
		var skip *SkipError
		if err := c.Check(ctx, h); err != nil && !errors.As(err, &skip) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run runs every case as a subtest of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			err := c.Check(t.Context(), h)
			var skip *SkipError
			switch {
			case errors.As(err, &skip):
				t.Skip(skip.Reason)
			case err != nil:
				t.Fatal(err)
			}
		})
	}
}

// Check runs the case alone. It returns nil, a *SkipError, or a *CaseError.
func (c Case) Check(ctx context.Context, h Harness) (err error) {
	if h.NewBackend == nil {
		return &CaseError{Case: c.Name, Rule: c.Rule, Err: errors.New("harness has no NewBackend")}
	}
	h = h.withDefaults()
	// A case that outlives this has hung: fail it rather than the run.
	ctx, cancel := context.WithTimeout(ctx, max(2*time.Minute, 20*(3*h.TTL+5*time.Second)))
	defer cancel()
	e := &env{ctx: ctx, h: h, name: c.Name, prefix: c.Name + "-" + randomID() + "/"}
	defer e.cleanup()
	defer func() {
		switch r := recover().(type) {
		case nil:
		case failure:
			err = &CaseError{Case: c.Name, Rule: c.Rule, Err: r.err}
		case skipped:
			err = &SkipError{Case: c.Name, Reason: string(r)}
		default:
			panic(r)
		}
	}()
	c.run(e)
	return nil
}

// env is one case's world: its Lockers (closed at the end) and its keys
// (unique per run, since backends share a server across cases).
type env struct {
	ctx     context.Context
	h       Harness
	name    string
	prefix  string
	mu      sync.Mutex
	lockers map[distlock.Locker]*crashable
}

// failure and skipped unwind a case from the goroutine running it, as
// t.Fatal and t.Skip do; Check turns them back into errors.
type failure struct{ err error }
type skipped string

func (e *env) fail(format string, args ...any) { panic(failure{fmt.Errorf(format, args...)}) }
func (e *env) skip(reason string)              { panic(skipped(reason)) }

func (e *env) key(name string) string { return e.prefix + name }

// locker returns a Locker on a new backend, closed at the case's end.
func (e *env) locker() distlock.Locker {
	b, err := e.h.NewBackend(e.ctx)
	if err != nil {
		e.fail("NewBackend: %v", err)
	}
	c := &crashable{Backend: b}
	var top driver.Backend = c
	if e.h.wrapBackend != nil {
		top = e.h.wrapBackend(c)
	}
	l, err := distlock.New(top) // closes top if it fails
	if err != nil {
		e.fail("distlock.New: %v", err)
	}
	if e.h.wrapLocker != nil {
		l = e.h.wrapLocker(l)
	}
	e.mu.Lock()
	if e.lockers == nil {
		e.lockers = make(map[distlock.Locker]*crashable)
	}
	e.lockers[l] = c
	e.mu.Unlock()
	return l
}

func (e *env) cleanup() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for l := range e.lockers {
		_ = l.Close()
	}
}

// patience bounds every wait for something that must happen: generous, so a
// slow machine does not fail a correct backend, yet finite, so a broken one
// cannot hang the suite.
func (e *env) patience() time.Duration { return 3*e.h.TTL + 5*time.Second }

func (e *env) timeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, d)
}

func (e *env) acquire(l distlock.Locker, key string, opts ...distlock.CallOption) *distlock.Lease {
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	ls, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		e.fail("Acquire(%q): %v", key, err)
	}
	if ls == nil {
		e.fail("Acquire(%q) returned neither a lease nor an error", key)
	}
	return ls
}

func (e *env) tryAcquire(l distlock.Locker, key string, opts ...distlock.CallOption) *distlock.Lease {
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	ls, err := l.TryAcquire(ctx, key, opts...)
	if err != nil {
		e.fail("TryAcquire(%q) on a free key: %v", key, err)
	}
	return ls
}

// mustBeHeld checks that key is held by someone: a TryAcquire from l fails
// with ErrNotAcquired.
func (e *env) mustBeHeld(l distlock.Locker, key, why string) {
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	ls, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err == nil {
		_ = ls.Release(ctx)
		e.fail("%s: TryAcquire(%q) succeeded while the key should be held", why, key)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		e.fail("%s: TryAcquire(%q) on a held key: want ErrNotAcquired, got %v", why, key, err)
	}
}

func (e *env) release(ls *distlock.Lease) {
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		e.fail("Release(%q): %v", ls.Key(), err)
	}
}

// waitDone waits for the lease to end and checks why.
func (e *env) waitDone(ls *distlock.Lease, within time.Duration, want error, why string) {
	select {
	case <-ls.Done():
	case <-time.After(within):
		e.fail("%s: Done() of the lease on %q did not close within %v", why, ls.Key(), within)
	case <-e.ctx.Done():
		e.fail("%s: %v", why, e.ctx.Err())
	}
	if err := ls.Err(); !errors.Is(err, want) {
		e.fail("%s: after Done, Err() = %v; want %v", why, err, want)
	}
}

// endOnServer makes a lease's lock end on the server: ForceExpire if the
// harness has it, else the TTL running out. It skips the case if neither
// is possible.
func (e *env) endOnServer(key string) {
	if e.h.ForceExpire != nil {
		ctx, cancel := e.timeout(e.patience())
		defer cancel()
		if err := e.h.ForceExpire(ctx, key); err != nil {
			e.fail("ForceExpire(%q): %v", key, err)
		}
		return
	}
	e.skip("harness has no ForceExpire")
}

// crash makes l stop as a crashed process would: no release, no more
// renewal; the server keeps l's locks until they expire.
func (e *env) crash(l distlock.Locker) {
	e.mu.Lock()
	c := e.lockers[l]
	e.mu.Unlock()
	if c == nil {
		e.fail("crash: a Locker the case did not make")
	}
	c.crash()
	if e.h.Crash == nil {
		return
	}
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	if err := e.h.Crash(ctx, c.Backend); err != nil {
		e.fail("Crash: %v", err)
	}
}

func (e *env) sessionTTL(l distlock.Locker) bool { return l.Guarantees().SessionTTL }

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
