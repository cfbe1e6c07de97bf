package distlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"github.com/distlock/distlock/driver"
)

func (l *locker) Inspect(ctx context.Context, key string) (Holder, error) {
	if ctx == nil {
		return Holder{}, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if err := ValidateKey(key); err != nil {
		return Holder{}, err
	}
	if err := l.enter(); err != nil {
		return Holder{}, err
	}
	defer l.wg.Done()
	bctx, bound := l.bind(ctx)
	defer bound.end()
	return l.inspect(ctx, bctx, key)
}

func (l *locker) inspect(ctx, bctx context.Context, key string) (Holder, error) {
	h, err := l.b.Inspect(bctx, key)
	switch {
	case err == nil:
		return Holder{Held: h.Held, Token: Token(h.Token), Value: h.Value, TTL: h.TTL, Waiters: h.Waiters}, nil
	case errors.Is(err, ErrUnsupported):
		return Holder{}, fmt.Errorf("distlock: the %s backend cannot inspect locks: %w", l.name, err)
	case errors.Is(context.Cause(bctx), ErrClosed):
		return Holder{}, fmt.Errorf("%w: inspecting %q", ErrClosed, key)
	case ctx.Err() != nil:
		return Holder{}, fmt.Errorf("distlock: %s: inspect %q: %w", l.name, key, ctx.Err())
	}
	return Holder{}, fmt.Errorf("distlock: %s: inspect %q: %w", l.name, key, unavailable(err))
}

func (l *locker) Watch(ctx context.Context, key string, opts ...CallOption) (<-chan Holder, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	o, err := driver.Apply(l.opts, driver.Options(opts))
	if err != nil {
		return nil, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := l.enter(); err != nil {
		return nil, err
	}
	bctx, bound := l.bind(ctx)
	ch := make(chan Holder)
	go func() {
		defer l.wg.Done()
		defer bound.end()
		defer close(ch)
		w := watch{l: l, key: key, o: &o, out: ch}
		w.run(ctx, bctx)
	}()
	return ch, nil
}

// watch is one Watch call's loop: inspect, report a change, wait for a
// notice or the next poll.
type watch struct {
	l   *locker
	key string
	o   *driver.Settings
	out chan<- Holder

	sub    driver.Subscription
	pushed bool // sub notices every change (Backend.Watch), not only releases

	reported  bool  // something was sent
	lastHeld  bool  // the last report was a holder
	lastToken Token // the largest token sent: a holder is sent only above it
}

// pushedPoll bounds the wait between two reads when the backend pushes
// every change: only a notice lost with a broken connection needs it.
const pushedPoll = 5 * time.Second

// readBound bounds each read of a Watch loop.
const readBound = 5 * time.Second

func (w *watch) run(ctx, bctx context.Context) {
	defer func() {
		if w.sub != nil {
			_ = w.sub.Close()
		}
	}()
	delay := w.o.BackoffMin // the next poll; grows while nothing changes
	for failures := 0; ; {
		w.subscribe(bctx)
		// A bound on each read: a client that waits for a server to come
		// back (etcd's does) would otherwise hold the loop silently.
		rctx, cancel := context.WithTimeout(bctx, readBound)
		h, err := w.l.inspect(ctx, rctx, w.key)
		cancel()
		if bctx.Err() != nil {
			return
		}
		if err != nil {
			w.l.log(slog.LevelWarn, "watch: inspect failed; retrying", w.key, err)
			if clock.Sleep(bctx, backoff(w.o, failures)) != nil {
				return
			}
			failures++
			continue
		}
		failures = 0
		if w.changed(h) {
			select {
			case w.out <- h:
			case <-bctx.Done():
				return
			}
			delay = w.o.BackoffMin // a change is often followed by another (a hand-over)
		} else {
			delay = min(2*delay, w.o.BackoffMax)
		}
		wait := delay
		if w.pushed {
			wait = pushedPoll
		} else if h.Held && h.TTL > 0 && h.TTL < wait {
			wait = h.TTL + w.o.BackoffMin // the expiry is the next change
		}
		if !w.wait(bctx, wait) {
			return
		}
	}
}

// changed reports whether h is news: the key freed since the last report,
// or a holder whose token is larger than every one reported. A holder with
// a token not larger is the one already reported or an earlier one that a
// server shows again after losing writes (a restart from an older
// snapshot, a failover to a replica that missed the latest grants):
// reporting it would show an older holder after a newer one. No real
// successor is hidden: backends report a holder only once its token is
// below every later grant's (Redlock: confirmed by a majority).
func (w *watch) changed(h Holder) bool {
	switch {
	case h.Held && h.Token <= w.lastToken: // tokens are positive: the first holder passes
		return false
	case h.Held:
		w.lastToken = h.Token
	case w.reported && !w.lastHeld: // still free
		return false
	}
	w.reported, w.lastHeld = true, h.Held
	return true
}

// subscribe starts the backend's notices if it has them and they are not
// running: Watch (every change) or else Subscribe (releases).
func (w *watch) subscribe(ctx context.Context) {
	if w.sub != nil {
		return
	}
	var err error
	w.sub, err = w.l.b.Watch(ctx, w.key)
	w.pushed = err == nil
	if errors.Is(err, driver.ErrUnsupported) {
		if w.l.mode != WaitNotify {
			return
		}
		w.sub, err = w.l.b.Subscribe(ctx, w.key)
	}
	if err != nil && ctx.Err() == nil {
		w.sub = nil
		w.l.log(slog.LevelWarn, "watch: notices unavailable; polling", w.key, err)
	}
}

// wait sleeps for d or until a notice; false when ctx ended.
func (w *watch) wait(ctx context.Context, d time.Duration) bool {
	if w.sub == nil {
		return clock.Sleep(ctx, d) == nil
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	err := w.sub.Wait(wctx)
	cancel()
	if ctx.Err() != nil {
		return false
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		w.l.log(slog.LevelWarn, "watch: notices failed; polling", w.key, err)
		_ = w.sub.Close()
		w.sub, w.pushed = nil, false
	}
	return true
}
