package distlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/mutation"
)

// transient reports whether err says the server could not be reached (as
// opposed to an answer, such as a refused certificate or an unknown host):
// a waiting Acquire tries again after it.
func transient(err error) bool {
	if errors.Is(err, ErrAccessDenied) {
		return false // an answer: asking again gets the same one
	}
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	if errors.Is(err, net.ErrClosed) {
		return false // our own client was closed
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTimeout || dns.IsTemporary
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op != "remote error" // a TLS alert is an answer
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return ne.Timeout()
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
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
// later) or fails, within the release timeout. Close interrupts it. With
// leave, the attempt was a waiting Acquire's last (its ctx ended): once the
// give-back has settled, the attempt can no longer land, and the waiter
// leaves the queue the attempt may have put it in.
func (l *locker) abandon(req driver.Request, o *driver.Settings, leave bool) {
	if mutation.On("no-giveback") { // mutation: no-giveback
		return
	}
	l.cleanUp("give-back", req.Key, o, func(ctx context.Context) {
		g := driver.Grant{Key: req.Key, Owner: req.Owner, TTL: req.TTL}
		// No cap on the pause: while the server is out of reach every
		// attempt is abandoned, and up to maxAbandoning give-backs that kept
		// asking would hold the client's connections after the heal. A
		// refusal will not change by asking again.
		_ = l.unlockRetrying(ctx, g, func(err error) bool { return err == nil || errors.Is(err, ErrAccessDenied) }, 0)
		if leave && req.Waiter != "" {
			l.dequeue(ctx, req)
		}
	})
}

// unlockRetrying calls Unlock until done accepts its answer or ctx ends,
// pausing between calls with a doubling back-off, capped at maxPause if
// that is not 0. It returns the last answer.
func (l *locker) unlockRetrying(ctx context.Context, g driver.Grant, done func(error) bool, maxPause time.Duration) error {
	delay := giveBackFirstPause
	for {
		err := l.b.Unlock(ctx, g)
		if done(err) || ctx.Err() != nil {
			return err
		}
		if clock.Sleep(ctx, delay) != nil {
			return err
		}
		delay *= 2
		if maxPause > 0 {
			delay = min(delay, maxPause)
		}
	}
}

// cleanUp runs fn in the background on a context that ends after the
// release timeout or at Close, which waits for it. At most maxAbandoning
// run at once: a server that is down makes every attempt ambiguous, and a
// tight retry loop must not pile them up (what is skipped frees at its
// TTL or deadline).
func (l *locker) cleanUp(what, key string, o *driver.Settings, fn func(ctx context.Context)) {
	if l.abandoning.Add(1) > maxAbandoning {
		l.abandoning.Add(-1)
		l.log(slog.LevelDebug, "too many clean-ups under way; skipping a "+what, key, nil)
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
		fn(ctx)
	}()
}

// maxAbandoning bounds the clean-ups (give-backs of abandoned attempts,
// queue leavings) under way at once.
const maxAbandoning = 64

// leaveQueue takes a waiting Acquire that ended without the lock out of
// the backend's queue (Backend.Dequeue), in the background as abandon
// does: the caller's ctx may be over and the server slow to answer, and
// the place lapses at its deadline anyway. Close interrupts it.
func (l *locker) leaveQueue(req driver.Request, o *driver.Settings) {
	if l.noDequeue.Load() {
		return
	}
	l.cleanUp("queue leaving", req.Key, o, func(ctx context.Context) { l.dequeue(ctx, req) })
}

// dequeue takes req's waiter out of the backend's queue.
func (l *locker) dequeue(ctx context.Context, req driver.Request) {
	if l.noDequeue.Load() {
		return
	}
	err := l.b.Dequeue(ctx, req.Key, req.Waiter)
	if errors.Is(err, driver.ErrUnsupported) {
		l.noDequeue.Store(true) // no queue: nothing to leave, now or later
		return
	}
	if err != nil {
		l.log(slog.LevelDebug, "leaving the wait queue failed; the place lapses at its deadline", req.Key, err)
	}
}

// The pauses between the calls of a give-back: the first, doubling; a lost
// lease's give-back (one per lease) pauses at most lostGiveBackMaxPause, so
// it lands soon after a network fault heals.
const (
	giveBackFirstPause   = 50 * time.Millisecond
	lostGiveBackMaxPause = 400 * time.Millisecond
)

// poll is the blocking acquire of backends without a server-side queue:
// attempt, then wait for a release notice (bounded by the holder's
// remaining TTL) or a jittered exponential back-off, and try again. Each
// attempt gets a new owner value in req; on success req holds the winner's.
func (l *locker) poll(ctx context.Context, req *driver.Request, o *driver.Settings) (_ driver.Grant, _ time.Time, err error) {
	p := &poller{l: l, req: req, o: o, subscribed: l.mode != WaitNotify}
	req.Waiter = req.Owner
	defer func() { p.end(err) }()
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !mutation.On("owner-reuse") { // mutation: owner-reuse
			req.Owner = newOwner()
		}
		start := now()
		g, next, err := p.try(ctx, attempt)
		switch next {
		case tryAgain:
			continue
		case settled:
			return g, start, err
		}
		p.contended = true
		l.observe(ctx, Event{Kind: EventContended, Key: req.Key})
		if !p.subscribed {
			began, err := p.subscribe(ctx)
			if err != nil {
				return driver.Grant{}, time.Time{}, err
			}
			if began {
				continue // the key may have been released before the subscription began
			}
		}
		if err := p.wait(ctx, attempt, retryAfter(err)); err != nil {
			return driver.Grant{}, time.Time{}, err
		}
	}
}

// What a poller does after an attempt.
type nextStep int

const (
	settled  nextStep = iota // return its grant or error
	tryAgain                 // at once: a transient failure's back-off is over
	waitHeld                 // wait for the holder, then try again
)

// poller is one blocking acquire's state across its attempts.
type poller struct {
	l   *locker
	req *driver.Request
	o   *driver.Settings
	// Release notices are subscribed to only once an attempt finds the key
	// held: a free key costs one round trip and no subscription.
	sub         driver.Subscription
	subscribed  bool  // tried, or nothing to try
	contended   bool  // an attempt found the key held: a queueing backend may have queued us
	unreachable error // the last transient failure, for the caller if ctx ends
}

// try makes one attempt and says what comes next.
func (p *poller) try(ctx context.Context, attempt int) (driver.Grant, nextStep, error) {
	g, err := p.l.b.TryLock(ctx, *p.req)
	if mayHaveTaken(err) {
		p.l.abandon(*p.req, p.o, ctx.Err() != nil)
	}
	if err != nil && ctx.Err() != nil && p.unreachable != nil {
		return driver.Grant{}, settled, p.unreachable
	}
	if err != nil && transient(err) && ctx.Err() == nil {
		// Out of reach for now: wait as for a held key, and keep the
		// error for the caller if ctx ends first.
		p.unreachable = err
		p.l.log(slog.LevelWarn, "server unavailable; retrying", p.req.Key, err)
		if clock.Sleep(ctx, backoff(p.o, attempt)) != nil {
			return driver.Grant{}, settled, err
		}
		return driver.Grant{}, tryAgain, nil
	}
	if err == nil || !errors.Is(err, ErrNotAcquired) {
		return g, settled, err
	}
	return driver.Grant{}, waitHeld, err
}

// subscribe starts the key's release notices, once. began reports that it
// did; a failure other than ctx's leaves the waiter polling.
func (p *poller) subscribe(ctx context.Context) (began bool, err error) {
	p.subscribed = true
	s, err := p.l.b.SubscribeWaiter(ctx, p.req.Key, p.req.Waiter)
	if errors.Is(err, driver.ErrUnsupported) {
		s, err = p.l.b.Subscribe(ctx, p.req.Key)
	}
	switch {
	case err == nil:
		p.sub = s
		return true, nil
	case ctx.Err() != nil:
		return false, err
	default:
		p.l.pollingInstead("subscribe failed", p.req.Key, err)
		return false, nil
	}
}

// wait waits before the next attempt: for a release notice if subscribed
// (the timeout only covers a lost notice or a holder that expired instead
// of releasing), else for a back-off cut short by the holder's remaining
// TTL.
func (p *poller) wait(ctx context.Context, attempt int, remaining time.Duration) error {
	if p.sub != nil {
		wctx, cancel := context.WithTimeout(ctx, fallbackPoll(p.o, remaining))
		werr := p.sub.Wait(wctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
			p.l.pollingInstead("subscription failed", p.req.Key, werr)
			_ = p.sub.Close()
			p.sub = nil
		}
		return nil
	}
	delay := backoff(p.o, attempt)
	if remaining > 0 && remaining < delay {
		delay = remaining + jitter(p.o.BackoffMin)
	}
	return clock.Sleep(ctx, delay)
}

// end leaves the queue if the acquire failed after a queueing backend may
// have queued the waiter, then closes the subscription.
func (p *poller) end(err error) {
	if err != nil && p.contended {
		p.l.leaveQueue(*p.req, p.o)
	}
	if p.sub != nil {
		_ = p.sub.Close()
	}
}

// retryAfter is the holder's remaining TTL that a refusal reports, if any.
func retryAfter(err error) time.Duration {
	var held *HeldError
	if errors.As(err, &held) {
		return held.RetryAfter
	}
	return 0
}

// mayHaveTaken reports whether a failed attempt (err) may have taken the
// lock all the same, so that it must be given back: not when the key was
// held. A refusal may come after the lock was set (a script denied a later
// command, and scripts do not roll back); its give-back is tried once.
func mayHaveTaken(err error) bool {
	return err != nil && !errors.Is(err, ErrNotAcquired)
}

// pollingInstead logs that a waiter polls because its release notices
// failed, unless the backend declined them (ErrUnsupported): it says why
// itself, once.
func (l *locker) pollingInstead(what, key string, err error) {
	if !errors.Is(err, ErrUnsupported) {
		l.log(slog.LevelWarn, what+"; polling instead", key, err)
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
