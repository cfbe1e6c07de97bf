package distlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"github.com/distlock/distlock/driver"
)

// New wraps a Backend in the portable layer and returns the Locker users
// program against. Backend packages call it from their own constructors;
// call it directly to run a third-party or wrapped Backend. New owns b: if
// it fails, it closes b, so a constructor can simply return its result.
func New(b driver.Backend, opts ...Option) (Locker, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidOption)
	}
	o, err := driver.ResolveLocker(defaultSettings(), b.Guarantees().Backend, driver.Options(opts))
	if err == nil {
		err = validateTTL(o.TTL)
	}
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	life, stop := context.WithCancelCause(context.Background())
	g := guaranteesOf(b)
	return &locker{b: b, opts: o, observer: observersOf(opts), name: g.Backend, mode: g.Wait, life: life, stop: stop,
		leases: make(map[*Lease]struct{})}, nil
}

// locker is the portable layer: everything a backend would otherwise repeat.
type locker struct {
	b        driver.Backend
	opts     driver.Settings
	observer Observer // WithObserver's, nil without one
	mode     WaitMode // Guarantees().Wait: which capability waits
	name     string

	// life is cancelled by Close; every backend call and background loop
	// is bound to it so that Close can interrupt them.
	life context.Context
	stop context.CancelCauseFunc

	abandoning atomic.Int32 // give-backs of abandoned attempts, and queue leavings, under way
	noDequeue  atomic.Bool  // the backend's Dequeue said ErrUnsupported
	renewer    *renewer     // started with the first renewing lease

	mu     sync.Mutex
	closed bool
	leases map[*Lease]struct{}
	calls  map[context.Context]binding // calls in flight on callers' contexts that can end
	wg     sync.WaitGroup              // in-flight calls and lease keepers
}

func (l *locker) Guarantees() Guarantees { return guaranteesOf(l.b) }

// As reaches the backend's underlying client; see the package-level As.
func (l *locker) As(target any) bool {
	a, ok := l.b.(interface{ As(any) bool })
	return ok && a.As(target)
}

func (l *locker) Acquire(ctx context.Context, key string, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, key, opts, true, false)
}

func (l *locker) TryAcquire(ctx context.Context, key string, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, key, opts, false, false)
}

func (l *locker) Do(ctx context.Context, key string, fn func(context.Context, *Lease) error, opts ...CallOption) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: Do needs a function", ErrInvalidOption)
	}
	lease, err := l.acquire(ctx, key, opts, true, true)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	lease.afterEnd(func() { cancel(lease.Err()) })
	defer func() {
		lost := lease.Err() // non-nil here only if the lease ended while fn ran
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), lease.o.ReleaseTimeout)
		rerr := lease.Release(rctx)
		rcancel()
		switch {
		case lost != nil:
			err = errors.Join(err, lost)
		case rerr != nil:
			// Stop renewing a lock we could not release; the server
			// frees it at its TTL (the give-back tries once more).
			lease.lost("Do could not release it: " + rerr.Error())
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx, lease)
}

// enter registers an in-flight call; it fails once Close has begun.
func (l *locker) enter() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.wg.Add(1)
	return nil
}

// bind derives a context that also ends when the Locker closes, and a
// binding whose end undoes it once the call returns.
func (l *locker) bind(ctx context.Context) (context.Context, binding) {
	if ctx == context.Background() || ctx == context.TODO() {
		return l.life, binding{} // no values to carry: the Locker's life as it is
	}
	if ctx.Done() == nil {
		// ctx never ends (Background, WithoutCancel…): the Locker's life
		// alone bounds the call, with ctx's values.
		return lifeWithValues{life: l.life, values: ctx}, binding{}
	}
	bctx, cancel := context.WithCancelCause(ctx)
	return bctx, l.register(bctx, binding{cause: cancel})
}

// bindTimeout is bind with a timeout: one context, not two, for Release.
// Close ends it with context.Canceled as its cause, not ErrClosed (ask
// l.isClosed).
func (l *locker) bindTimeout(ctx context.Context, d time.Duration) (context.Context, binding) {
	if ctx == context.Background() || ctx == context.TODO() {
		tctx, cancel := context.WithTimeout(l.life, d)
		return tctx, binding{cancel: cancel}
	}
	if ctx.Done() == nil {
		tctx, cancel := context.WithTimeout(lifeWithValues{life: l.life, values: ctx}, d)
		return tctx, binding{cancel: cancel}
	}
	tctx, cancel := context.WithTimeout(ctx, d)
	return tctx, l.register(tctx, binding{cancel: cancel})
}

// register adds a call's context to those Close ends; if Close has begun,
// it ends it at once.
func (l *locker) register(ctx context.Context, b binding) binding {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		b.stop(ErrClosed)
		return b
	}
	if l.calls == nil {
		l.calls = make(map[context.Context]binding)
	}
	l.calls[ctx] = b
	l.mu.Unlock()
	b.l, b.ctx = l, ctx
	return b
}

// isClosed reports whether Close has begun.
func (l *locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// binding is what bind registered for a call: Close ends the call's
// context through it (a map entry per call, where context.AfterFunc on the
// Locker's life cost three allocations and that context's lock).
type binding struct {
	l      *locker                 // nil: nothing registered
	ctx    context.Context         // the key in l.calls
	cause  context.CancelCauseFunc // one of cause, cancel
	cancel context.CancelFunc
}

func (b binding) stop(cause error) {
	switch {
	case b.cause != nil:
		b.cause(cause)
	case b.cancel != nil:
		b.cancel()
	}
}

// end unregisters the call and releases its context.
func (b binding) end() {
	if b.l != nil {
		b.l.mu.Lock()
		delete(b.l.calls, b.ctx)
		b.l.mu.Unlock()
	}
	b.stop(nil)
}

// lifeWithValues ends with life (Done, Err, Cause) and carries the values of
// a caller's context that never ends, one allocation instead of a cancel
// context and an AfterFunc per call.
type lifeWithValues struct {
	life   context.Context
	values context.Context
}

func (c lifeWithValues) Deadline() (time.Time, bool) { return c.life.Deadline() }
func (c lifeWithValues) Done() <-chan struct{}       { return c.life.Done() }
func (c lifeWithValues) Err() error                  { return c.life.Err() }

// Value asks life first: it holds no values of its own, only the context
// package's cancellation key, through which contexts derived from this one
// (and context.Cause) find life's cancellation without a goroutine.
func (c lifeWithValues) Value(key any) any {
	if v := c.life.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}

func (l *locker) acquire(ctx context.Context, key string, opts []CallOption, wait, renew bool) (*Lease, error) {
	o, err := l.acquireSettings(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	if err := l.enter(); err != nil {
		return nil, err
	}
	defer l.wg.Done()
	bctx, bound := l.bind(ctx)
	defer bound.end()

	// Every attempt has its own owner value (poll draws a new one per
	// try), so nothing a failed attempt leaves behind, such as a late
	// release or a lock set by a request whose reply was lost, can match
	// a later attempt.
	req := driver.Request{Key: key, TTL: o.TTL, Owner: newOwner(), Drift: o.DriftRule(), Value: o.Value}
	began := now()
	g, start, err := l.attempt(bctx, &req, &o, wait)
	if err != nil {
		err = l.acquireError(ctx, bctx, key, err)
		l.observe(ctx, Event{Kind: EventAcquireFailed, Key: key, Duration: now().Sub(began), Err: err})
		return nil, err
	}
	if !g.Start.IsZero() {
		start = g.Start
	}
	lease, err := l.newLease(req, g, start, &o, renew || o.AutoRenew)
	if err != nil {
		return nil, err
	}
	l.observe(ctx, Event{Kind: EventAcquired, Key: key, Token: Token(g.Token), Duration: now().Sub(began)})
	return lease, nil
}

// acquireSettings checks an acquire's arguments and resolves its settings.
func (l *locker) acquireSettings(ctx context.Context, key string, opts []CallOption) (driver.Settings, error) {
	if ctx == nil {
		return driver.Settings{}, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	o, err := driver.Apply(l.opts, driver.Options(opts))
	if err != nil {
		return driver.Settings{}, err
	}
	if err := ValidateKey(key); err != nil {
		return driver.Settings{}, err
	}
	if err := validateTTL(o.TTL); err != nil {
		return driver.Settings{}, err
	}
	if o.TTL <= o.Drift(o.TTL) {
		return driver.Settings{}, fmt.Errorf("%w: %v is not above the clock-drift allowance %v", ErrInvalidTTL, o.TTL, o.Drift(o.TTL))
	}
	return o, nil
}

// attempt acquires once (TryAcquire) or until ctx ends: in the server's
// queue where the backend keeps one, else by polling. start is when the
// attempt that won was sent.
func (l *locker) attempt(ctx context.Context, req *driver.Request, o *driver.Settings, wait bool) (g driver.Grant, start time.Time, err error) {
	switch {
	case wait && l.mode == WaitQueue:
		return l.lockQueued(ctx, req, o)
	case wait:
		return l.poll(ctx, req, o)
	}
	start = now()
	g, err = l.b.TryLock(ctx, *req)
	if mayHaveTaken(err) {
		l.abandon(*req, o, false)
	}
	return g, start, err
}

// lockQueued waits in the server's queue. Lock leaves nothing behind on
// failure, so a server out of reach is simply tried again, with a new
// owner value: nothing of the failed attempt may match the next.
func (l *locker) lockQueued(ctx context.Context, req *driver.Request, o *driver.Settings) (g driver.Grant, start time.Time, err error) {
	var unreachable error // the last transient failure, for the caller if ctx ends
	for attempt := 0; ; attempt++ {
		start = now()
		g, err = l.b.Lock(ctx, *req)
		if err != nil && ctx.Err() != nil && unreachable != nil {
			err = unreachable
		}
		if err == nil || !transient(err) || ctx.Err() != nil {
			return g, start, err
		}
		unreachable = err
		l.log(slog.LevelWarn, "server unavailable; retrying", req.Key, err)
		if clock.Sleep(ctx, backoff(o, attempt)) != nil {
			return g, start, err // acquireError adds ctx's
		}
		req.Owner = newOwner()
	}
}

// acquireError gives a failed acquire its public shape: ErrClosed if the
// Locker closed, ErrNotAcquired+ctx.Err() if the caller's context ended,
// the backend's error wrapped otherwise.
func (l *locker) acquireError(ctx, bctx context.Context, key string, err error) error {
	if errors.Is(context.Cause(bctx), ErrClosed) {
		return fmt.Errorf("%w: acquiring %q", ErrClosed, key)
	}
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(err, ErrUnavailable) ||
			!errors.Is(err, ErrNotAcquired) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			// Keep what the server said: "deadline exceeded" alone hides
			// a dead server.
			return fmt.Errorf("%w (last error: %w)", waitEnded(key, cerr), unavailable(err))
		}
		return waitEnded(key, cerr)
	}
	if errors.Is(err, ErrNotAcquired) {
		return err
	}
	return fmt.Errorf("distlock: %s: acquire %q: %w", l.name, key, unavailable(err))
}

func (l *locker) newLease(req driver.Request, g driver.Grant, start time.Time, o *driver.Settings, renew bool) (*Lease, error) {
	g.Key, g.Owner, g.TTL, g.Drift = req.Key, req.Owner, req.TTL, req.Drift
	validity := g.Validity
	if validity <= 0 {
		validity = req.TTL
	}
	ls := &Lease{
		l: l, grant: g, o: *o, ttl: req.TTL, acquired: start,
		deadline: start.Add(validity - o.Drift(req.TTL)),
		done:     make(chan struct{}),
		call:     make(chan struct{}, 1),
		renewing: renew,
		renewIdx: -1,
	}
	giveBack := func() {
		ctx, cancel := context.WithTimeout(context.Background(), o.ReleaseTimeout)
		defer cancel()
		_ = l.b.Unlock(ctx, g)
	}
	if !now().Before(ls.deadline) {
		// Confirmed after its validity ran out (a long pause, a slow
		// quorum): it may already be someone else's.
		giveBack()
		return nil, fmt.Errorf("%w: %q was confirmed after its validity ran out", ErrNotAcquired, req.Key)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		giveBack() // Close began while we were acquiring
		return nil, fmt.Errorf("%w: acquiring %q", ErrClosed, req.Key)
	}
	l.leases[ls] = struct{}{}
	if renew && l.renewer == nil {
		l.renewer = newRenewer(l)
		l.wg.Add(1)
		go l.renewer.run()
	}
	// No goroutine per lease: a timer ends it at its deadline, the
	// backend's loss notice ends it through AfterFunc, and the Locker's
	// renewer refreshes it.
	ls.mu.Lock() // the timer may fire before AfterFunc returns
	ls.expiry = time.AfterFunc(time.Until(ls.deadline), ls.expired)
	if g.Lost != nil {
		ls.stopLost = context.AfterFunc(g.Lost, func() {
			ls.lost("the backend reported it gone (session or lease ended)")
		})
	}
	ls.mu.Unlock()
	l.mu.Unlock()
	if renew {
		l.renewer.schedule(ls, ls.nextRenew())
	}
	return ls, nil
}

func (l *locker) forget(ls *Lease) {
	l.mu.Lock()
	delete(l.leases, ls)
	l.mu.Unlock()
}

func (l *locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	leases := make([]*Lease, 0, len(l.leases))
	for ls := range l.leases {
		leases = append(leases, ls)
	}
	calls := l.calls
	l.calls = nil
	l.mu.Unlock()

	l.stop(ErrClosed) // wakes waiters, interrupts renewals
	for _, b := range calls {
		b.stop(ErrClosed) // and the calls bound to their callers' contexts
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.ReleaseTimeout)
	var wg sync.WaitGroup
	for _, ls := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls.closeOut(ctx)
		}()
	}
	wg.Wait()
	cancel()
	l.wg.Wait()
	return l.b.Close()
}

func (l *locker) observe(ctx context.Context, e Event) {
	if l.observer != nil {
		e.Backend = l.name
		l.observer.Observe(ctx, e)
	}
}

func (l *locker) log(level slog.Level, msg, key string, err error) {
	if l.opts.Logger != nil {
		l.opts.Logger.Log(context.Background(), level, "distlock: "+msg,
			slog.String("backend", l.name), slog.String("key", key), slog.Any("error", err))
	}
}
