package distlock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

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
	o, err := driver.Resolve(defaultSettings(), b.Guarantees().Backend, opts)
	if err == nil {
		err = validateTTL(o.TTL)
	}
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	life, stop := context.WithCancelCause(context.Background())
	g := b.Guarantees()
	return &locker{b: b, opts: o, name: g.Backend, mode: g.Wait, life: life, stop: stop,
		leases: make(map[*Lease]struct{})}, nil
}

// locker is the portable layer: everything a backend would otherwise repeat.
type locker struct {
	b    driver.Backend
	opts driver.Settings
	mode driver.WaitMode // Guarantees().Wait: which capability waits
	name string

	// life is cancelled by Close; every backend call and background loop
	// is bound to it so that Close can interrupt them.
	life context.Context
	stop context.CancelCauseFunc

	abandoning atomic.Int32 // give-backs of abandoned attempts under way

	mu     sync.Mutex
	closed bool
	leases map[*Lease]struct{}
	wg     sync.WaitGroup // in-flight calls and lease keepers
}

func (l *locker) Guarantees() Guarantees { return l.b.Guarantees() }

// As reaches the backend's underlying client; see the package-level As.
func (l *locker) As(target any) bool {
	a, ok := l.b.(interface{ As(any) bool })
	return ok && a.As(target)
}

func (l *locker) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, key, opts, true, false)
}

func (l *locker) TryAcquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, key, opts, false, false)
}

func (l *locker) Do(ctx context.Context, key string, fn func(context.Context, *Lease) error, opts ...Option) (err error) {
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

// bind derives a context that also ends when the Locker closes.
func (l *locker) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.life, func() { cancel(ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

func (l *locker) acquire(ctx context.Context, key string, opts []Option, wait, renew bool) (*Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	o, err := driver.ResolveCall(l.opts, opts)
	if err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := validateTTL(o.TTL); err != nil {
		return nil, err
	}
	if o.TTL <= o.Drift(o.TTL) {
		return nil, fmt.Errorf("%w: %v is not above the clock-drift allowance %v", ErrInvalidTTL, o.TTL, o.Drift(o.TTL))
	}
	if err := l.enter(); err != nil {
		return nil, err
	}
	defer l.wg.Done()
	bctx, done := l.bind(ctx)
	defer done()

	// Every attempt has its own owner value (poll draws a new one per
	// try), so nothing a failed attempt leaves behind, such as a late
	// release or a lock set by a request whose reply was lost, can match
	// a later attempt.
	req := driver.Request{Key: key, TTL: o.TTL, Owner: newOwner()}
	began := now()
	var (
		g     driver.Grant
		start time.Time
	)
	if wait && l.mode == driver.WaitQueue {
		// The server's queue; Lock leaves nothing behind on failure, so a
		// server out of reach is simply tried again.
		for attempt := 0; ; attempt++ {
			start = now()
			g, err = l.b.Lock(bctx, req)
			if err == nil || !transient(err) || bctx.Err() != nil {
				break
			}
			l.log(slog.LevelWarn, "server unavailable; retrying", key, err)
			if driver.Sleep(bctx, backoff(&o, attempt)) != nil {
				break // err is the last failure; acquireError adds ctx's
			}
		}
	} else if wait {
		g, start, err = l.poll(bctx, &req, &o)
	} else {
		start = now()
		g, err = l.b.TryLock(bctx, req)
		if err != nil && !errors.Is(err, ErrNotAcquired) {
			l.abandon(req, &o)
		}
	}
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
	l.observe(ctx, Event{Kind: EventAcquired, Key: key, Token: g.Token, Duration: now().Sub(began)})
	return lease, nil
}

// acquireError gives a failed acquire its public shape: ErrClosed if the
// Locker closed, ErrNotAcquired+ctx.Err() if the caller's context ended,
// the backend's error wrapped otherwise.
func (l *locker) acquireError(ctx, bctx context.Context, key string, err error) error {
	if errors.Is(context.Cause(bctx), ErrClosed) {
		return fmt.Errorf("%w: acquiring %q", ErrClosed, key)
	}
	if cerr := ctx.Err(); cerr != nil {
		if !errors.Is(err, ErrNotAcquired) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
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

// transient reports whether err says the server could not be reached (as
// opposed to an answer): a waiting Acquire tries again after it.
func transient(err error) bool {
	var ne net.Error
	return errors.Is(err, ErrUnavailable) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// unavailable makes a network failure match ErrUnavailable too.
func unavailable(err error) error {
	if transient(err) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// abandon gives back, in the background, whatever an attempt whose outcome
// is unknown (a timeout, a reset connection) may have taken: its request
// may have reached the server, or still be on its way, and the lock would
// then sit unused until its TTL. The release is owner-checked with the
// attempt's own owner, so it can only free that attempt's lock; it is tried
// again, with back-off, while it finds nothing (the request may land
// later) or fails, within the release timeout. Close interrupts it.
func (l *locker) abandon(req driver.Request, o *driver.Settings) {
	if l.abandoning.Add(1) > maxAbandoning {
		// A server that is down makes every attempt ambiguous; a tight
		// retry loop must not pile up give-backs. The TTL frees the rest.
		l.abandoning.Add(-1)
		l.log(slog.LevelDebug, "too many give-backs under way; this attempt's lock frees at its TTL", req.Key, nil)
		return
	}
	if l.enter() != nil {
		l.abandoning.Add(-1)
		return
	}
	go func() {
		defer l.wg.Done()
		defer l.abandoning.Add(-1)
		ctx, cancel := context.WithTimeout(l.life, o.ReleaseTimeout)
		defer cancel()
		g := driver.Grant{Key: req.Key, Owner: req.Owner, TTL: req.TTL}
		for delay := abandonFirstRetry; ; delay *= 2 {
			err := l.b.Unlock(ctx, g)
			if err == nil || ctx.Err() != nil {
				return
			}
			if err := driver.Sleep(ctx, delay); err != nil {
				return
			}
		}
	}()
}

// maxAbandoning bounds the give-backs of abandoned attempts under way at once.
const maxAbandoning = 64

// abandonFirstRetry is the first pause between the give-backs of an
// abandoned attempt; it doubles after each.
const abandonFirstRetry = 50 * time.Millisecond

// poll is the blocking acquire of backends without a server-side queue:
// attempt, then wait for a release notice (bounded by the holder's
// remaining TTL) or a jittered exponential back-off, and try again. Each
// attempt gets a new owner value in req; on success req holds the winner's.
func (l *locker) poll(ctx context.Context, req *driver.Request, o *driver.Settings) (driver.Grant, time.Time, error) {
	var sub driver.Subscription
	if l.mode == driver.WaitNotify {
		s, err := l.b.Subscribe(ctx, req.Key)
		switch {
		case err == nil:
			sub = s
			// sub may be dropped (set to nil, after closing it) below.
			defer func() {
				if sub != nil {
					_ = sub.Close()
				}
			}()
		case ctx.Err() != nil:
			return driver.Grant{}, time.Time{}, err
		default:
			l.log(slog.LevelWarn, "subscribe failed; polling instead", req.Key, err)
		}
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			req.Owner = newOwner()
		}
		start := now()
		g, err := l.b.TryLock(ctx, *req)
		if err != nil && !errors.Is(err, ErrNotAcquired) {
			l.abandon(*req, o)
		}
		if err != nil && transient(err) && ctx.Err() == nil {
			// Out of reach for now: wait as for a held key, and keep the
			// error for the caller if ctx ends first.
			l.log(slog.LevelWarn, "server unavailable; retrying", req.Key, err)
			if driver.Sleep(ctx, backoff(o, attempt)) != nil {
				return driver.Grant{}, time.Time{}, err
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrNotAcquired) {
			return g, start, err
		}
		l.observe(ctx, Event{Kind: EventContended, Key: req.Key})
		var remaining time.Duration
		var held *HeldError
		if errors.As(err, &held) {
			remaining = held.RetryAfter
		}
		if sub != nil {
			// The notice is the real wake-up; the timeout only covers a
			// lost notice or a holder that expired instead of releasing.
			wctx, cancel := context.WithTimeout(ctx, fallbackPoll(o, remaining))
			werr := sub.Wait(wctx)
			cancel()
			if ctx.Err() != nil {
				return driver.Grant{}, time.Time{}, ctx.Err()
			}
			if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
				l.log(slog.LevelWarn, "subscription failed; polling instead", req.Key, werr)
				_ = sub.Close()
				sub = nil
			}
			continue
		}
		delay := backoff(o, attempt)
		if remaining > 0 && remaining < delay {
			delay = remaining + jitter(o.BackoffMin)
		}
		if err := driver.Sleep(ctx, delay); err != nil {
			return driver.Grant{}, time.Time{}, err
		}
	}
}

// maxFallbackPoll caps the wait for a release notice, so a lost notice on a
// long-TTL key strands a waiter for at most this long.
const maxFallbackPoll = 5 * time.Second

func fallbackPoll(o *driver.Settings, remaining time.Duration) time.Duration {
	d := o.BackoffMax
	if remaining > 0 {
		d = min(remaining, maxFallbackPoll)
	}
	return d + jitter(o.BackoffMin)
}

// backoff is full-jitter exponential back-off: uniform in
// [min, min(max, min·2^attempt)].
func backoff(o *driver.Settings, attempt int) time.Duration {
	ceil := o.BackoffMax
	if attempt < 62 && o.BackoffMin <= o.BackoffMax>>attempt { // no overflow
		ceil = o.BackoffMin << attempt
	}
	return o.BackoffMin + jitter(ceil-o.BackoffMin)
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return mrand.N(d)
}

func (l *locker) newLease(req driver.Request, g driver.Grant, start time.Time, o *driver.Settings, renew bool) (*Lease, error) {
	g.Key, g.Owner, g.TTL = req.Key, req.Owner, req.TTL
	validity := g.Validity
	if validity <= 0 {
		validity = req.TTL
	}
	ls := &Lease{
		l: l, grant: g, o: *o, ttl: req.TTL, acquired: start, holder: holderID(req.Owner),
		deadline: start.Add(validity - o.Drift(req.TTL)),
		done:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		call:     make(chan struct{}, 1),
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
	if renew || g.Lost != nil {
		l.wg.Add(1)
		l.mu.Unlock()
		go ls.keep(renew)
		return ls, nil
	}
	// Nothing to renew or watch: a timer ends the lease at its deadline,
	// sparing the goroutine (and its wake-ups) on the hot path.
	ls.mu.Lock() // the timer may fire before AfterFunc returns
	ls.expiry = time.AfterFunc(time.Until(ls.deadline), ls.expired)
	ls.mu.Unlock()
	l.mu.Unlock()
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
	l.mu.Unlock()

	l.stop(ErrClosed) // wakes waiters, interrupts renewals
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
	if l.opts.Observer != nil {
		e.Backend = l.name
		l.opts.Observer.Observe(ctx, e)
	}
}

func (l *locker) log(level slog.Level, msg, key string, err error) {
	if l.opts.Logger != nil {
		l.opts.Logger.Log(context.Background(), level, "distlock: "+msg,
			slog.String("backend", l.name), slog.String("key", key), slog.Any("error", err))
	}
}

// ValidateKey reports whether key is acceptable to every backend: not empty,
// at most MaxKeyLen bytes, valid UTF-8 and free of control characters.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidKey, key)
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q holds a control character", ErrInvalidKey, key)
		}
	}
	return nil
}

func validateTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxTTL {
		return fmt.Errorf("%w: %v (want 0 < TTL <= %v)", ErrInvalidTTL, ttl, MaxTTL)
	}
	return nil
}

// holderID derives a lease's public holder id from its owner value: a
// hash, so that storing it in a database does not reveal the owner value
// that proves ownership to the lock service.
func holderID(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(h[:12])
}

// newOwner returns a random 128-bit owner value: unique per lease, so that
// no other lease, process or host can pass an owner check by accident.
func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux (Go ≥1.24 it cannot fail)
	return hex.EncodeToString(b[:])
}
