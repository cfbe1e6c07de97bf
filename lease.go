package distlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// Lease is a held lock. Its Token fences the resource it protects; its Done
// channel closes when the lease ends, by Release or by loss, and Err then
// says which. A Lease is safe for concurrent use.
type Lease struct {
	l          *locker
	grant      driver.Grant
	o          driver.Settings
	acquired   time.Time
	holder     string    // Fence().Holder: derived from the owner, not revealing it; set by holderOnce
	holderOnce sync.Once // the hash is worked out on the first Fence: most leases never need it

	// call is a one-slot semaphore serialising the lease's round trips
	// (refresh, release) so deadlines move in the order the server saw
	// them; unlike a mutex, waiting for it respects a context.
	call chan struct{}

	// released is set once Release was asked for: a renewing lease stops
	// renewing even if the release fails, so the key frees at its TTL.
	released atomic.Bool

	// renewing leases are refreshed by the Locker's renewer, which keeps
	// renewAt and renewIdx under its own lock.
	renewing bool
	renewAt  time.Time
	renewIdx int // in the renewer's queue; -1 when not queued

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time
	end      error
	onEnd    []func()
	done     chan struct{}
	expiry   *time.Timer // ends the lease at its deadline
	stopLost func() bool // stops watching Grant.Lost
}

// Key returns the locked key.
func (ls *Lease) Key() string { return ls.grant.Key }

// Token returns the fencing token: larger than that of every earlier holder
// of this key.
func (ls *Lease) Token() Token { return Token(ls.grant.Token) }

// unlockGrant is the grant as Unlock gets it: with the lease's current TTL.
func (ls *Lease) unlockGrant() driver.Grant {
	g := ls.grant
	g.TTL = ls.TTL()
	return g
}

// Value returns the holder's value stored with the lock (WithValue).
func (ls *Lease) Value() string { return ls.o.Value }

// Fence returns the Locker's fence epoch (WithFenceEpoch), the lease's token
// and its holder id, for a guarded write (see package fencing).
func (ls *Lease) Fence() Fence {
	ls.holderOnce.Do(func() { ls.holder = holderID(ls.grant.Owner) })
	return Fence{Epoch: ls.o.FenceEpoch, Token: Token(ls.grant.Token), Holder: ls.holder}
}

// TTL returns the TTL of the latest successful acquire or refresh.
func (ls *Lease) TTL() time.Duration {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.ttl
}

// Expires returns the conservative local deadline: the start of the latest
// successful acquire or refresh attempt, plus the validity the server
// confirmed, minus the clock-drift allowance. Past it the lease is lost.
func (ls *Lease) Expires() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.deadline
}

// Done returns a channel closed when the lease ends: released, lost, or its
// Locker closed.
func (ls *Lease) Done() <-chan struct{} { return ls.done }

// Err returns nil while the lease is held; after Done closes it returns
// ErrReleased, an error matching ErrLeaseLost that says why, or ErrClosed.
func (ls *Lease) Err() error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.end
}

// As reaches backend-specific state of the lease (for instance an etcd
// comparison that holds only while this lease owns the key); see each
// backend's docs for the types it offers.
func (ls *Lease) As(target any) bool {
	a, ok := ls.grant.Handle.(interface{ As(any) bool })
	return ok && a.As(target)
}

// Refresh extends the lease to its TTL (or to WithTTL's, which then becomes
// the lease's TTL) from now. It returns an error matching ErrNotHeld, and
// ErrLeaseLost, if the lease ended or the server no longer has it as ours;
// any other error leaves the lease as it was.
func (ls *Lease) Refresh(ctx context.Context, opts ...RefreshOption) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	base := ls.o
	base.TTL = ls.TTL()
	o, err := driver.Apply(base, driver.Options(opts))
	if err != nil {
		return err
	}
	ttl := o.TTL
	if err := validateTTL(ttl); err != nil {
		return err
	}
	if err := ls.l.enter(); err != nil {
		return notHeld(ls.Key(), err)
	}
	defer ls.l.wg.Done()
	ctx, bound := ls.l.bind(ctx)
	defer bound.end()
	return ls.refresh(ctx, ttl)
}

func (ls *Lease) refresh(ctx context.Context, ttl time.Duration) error {
	if end := ls.Err(); end != nil {
		return notHeld(ls.Key(), end)
	}
	// A refresh confirmed after the deadline is worthless: bound the wait
	// and the round trip by it, so a stalled server or a stuck caller cannot
	// keep the lease looking held.
	ctx, cancel := context.WithDeadline(ctx, ls.Expires())
	defer cancel()
	if err := ls.lockCall(ctx); err != nil {
		return ls.refreshFailed(ctx, err)
	}
	defer ls.unlockCall()
	start, err := ls.refreshStart()
	if err != nil {
		return err
	}
	if ttl == 0 {
		// A renewal: read under the semaphore, so that it cannot undo a
		// Refresh(WithTTL) that ran while it waited.
		ttl = ls.TTL()
	}
	// A shorter TTL takes effect when the call reaches the server, before
	// its answer: from now on the lease cannot count on more.
	ls.mayHaveShortened(start, ttl)
	validity, err := ls.l.b.Refresh(ctx, ls.grant, ttl)
	return ls.refreshDone(ctx, start, ttl, validity, err)
}

// refreshStart checks, holding the call semaphore, that a refresh may
// still be sent, and returns when it starts.
func (ls *Lease) refreshStart() (time.Time, error) {
	if end := ls.Err(); end != nil {
		return time.Time{}, notHeld(ls.Key(), end)
	}
	start := now()
	if !start.Before(ls.Expires()) {
		// Too late: another holder may already have the key.
		return start, notHeld(ls.Key(), ls.lost("its validity ran out before the refresh"))
	}
	return start, nil
}

// refreshDone applies the outcome of a refresh to ttl started at start.
func (ls *Lease) refreshDone(ctx context.Context, start time.Time, ttl, validity time.Duration, err error) error {
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			// Given back all the same: the release marks the lease's owner
			// as done on the server, so that an earlier request of the
			// lease still on its way (a late acquire copy) takes nothing.
			return notHeld(ls.Key(), ls.lost("the server no longer has it as ours: "+err.Error()))
		}
		// The call may have reached the server: a shorter TTL may now be
		// in force there (the deadline was pulled in when it was sent).
		return ls.refreshFailed(ctx, err)
	}
	if validity <= 0 {
		validity = ttl
	}
	deadline := start.Add(validity - ls.o.Drift(ttl))
	if !now().Before(deadline) {
		return notHeld(ls.Key(), ls.lost("the refresh was confirmed after its own deadline"))
	}
	ls.mu.Lock()
	if ls.end != nil { // the deadline passed while the refresh was in flight
		end := ls.end
		ls.mu.Unlock()
		return notHeld(ls.Key(), end)
	}
	ls.ttl = ttl
	ls.moveDeadlineLocked(deadline)
	ls.mu.Unlock()
	ls.l.observe(ctx, Event{Kind: EventRefreshed, Key: ls.Key(), Token: ls.Token(), Duration: now().Sub(start)})
	return nil
}

// mayHaveShortened pulls the deadline in to what a refresh to ttl, started
// at start, leaves once it reaches the server: while it is on its way, and
// after it, if no answer comes.
func (ls *Lease) mayHaveShortened(start time.Time, ttl time.Duration) {
	d := start.Add(ttl - ls.o.Drift(ttl))
	ls.mu.Lock()
	if ls.end != nil || !d.Before(ls.deadline) {
		ls.mu.Unlock()
		return
	}
	ls.moveDeadlineLocked(d)
	ls.mu.Unlock()
}

// moveDeadlineLocked sets the deadline and re-arms the timer that ends the
// lease at it; a renewing lease is renewed no later than its (maybe
// shortened) schedule now asks. ls.mu must be held.
func (ls *Lease) moveDeadlineLocked(d time.Time) {
	ls.deadline = d
	ls.expiry.Reset(time.Until(d))
	if ls.renewing {
		ls.l.renewer.pullIn(ls, max(min(renewEvery(&ls.o, ls.ttl), time.Until(d)/2), time.Millisecond))
	}
}

// refreshFailed reports a refresh that did not get an answer: the lease is
// lost if its deadline has passed meanwhile, else still held.
func (ls *Lease) refreshFailed(ctx context.Context, err error) error {
	if end := ls.Err(); end != nil {
		return notHeld(ls.Key(), end)
	}
	if !now().Before(ls.Expires()) {
		return notHeld(ls.Key(), ls.lost("its validity ran out while refreshing: "+err.Error()))
	}
	err = fmt.Errorf("distlock: %s: refresh %q: %w", ls.l.name, ls.Key(), err)
	ls.l.observe(ctx, Event{Kind: EventRefreshFailed, Key: ls.Key(), Token: ls.Token(), Err: err})
	return err
}

func (ls *Lease) lockCall(ctx context.Context) error {
	if ls.tryLockCall() {
		return nil // free: no need to make ctx's Done channel
	}
	select {
	case ls.call <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (ls *Lease) unlockCall() { <-ls.call }

// tryLockCall takes the call semaphore if it is free.
func (ls *Lease) tryLockCall() bool {
	select {
	case ls.call <- struct{}{}:
		return true
	default:
		return false
	}
}

// Release gives the lock up, only if it is still ours on the server. It
// returns an error matching ErrNotHeld if the lease had already ended (and
// ErrLeaseLost too if it ended by loss); it then returns at once, without a
// round trip: a lease lost by the local clock is already being given back in
// the background. Release waits at most the release timeout
// (WithReleaseTimeout), whatever ctx allows, so a deferred
// Release(context.Background()) cannot hang on a dead server. If the
// release call itself fails, it may or may not have reached the server, so
// the lock may already be someone else's: the lease ends as lost (Err
// matches ErrLeaseLost) and is given back, owner-checked, in the background;
// if that fails too, the server frees the lock at its TTL.
func (ls *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if end := ls.Err(); end != nil {
		return notHeld(ls.Key(), end)
	}
	if err := ls.l.enter(); err != nil {
		return notHeld(ls.Key(), err)
	}
	defer ls.l.wg.Done()
	ctx, bound := ls.l.bindTimeout(ctx, ls.o.ReleaseTimeout)
	defer bound.end()
	ls.released.Store(true)

	if err := ls.lockCall(ctx); err != nil {
		if end := ls.Err(); end != nil { // ended while we waited
			return notHeld(ls.Key(), end)
		}
		return fmt.Errorf("distlock: %s: release %q: %w", ls.l.name, ls.Key(), err)
	}
	defer ls.unlockCall()
	if end := ls.Err(); end != nil {
		return notHeld(ls.Key(), end)
	}
	err := ls.l.b.Unlock(ctx, ls.unlockGrant())
	switch {
	case err == nil:
		if !ls.finish(ErrReleased) { // the deadline passed during the call
			return notHeld(ls.Key(), ls.Err())
		}
		return nil
	case errors.Is(err, ErrNotHeld):
		lost := ls.lostOnServer("the server no longer had it as ours at release: " + err.Error())
		return notHeld(ls.Key(), lost)
	default:
		err = fmt.Errorf("distlock: %s: release %q: %w", ls.l.name, ls.Key(), err)
		if ctx.Err() != nil && ls.l.isClosed() {
			return err // Close releases the lease itself, once this call is out of its way
		}
		// The lease ends (Err matches ErrLeaseLost), but the error says only
		// that the release failed: whatever ran under the lease ran held.
		ls.lost("its release failed, and may have reached the server: " + err.Error())
		return err
	}
}

// closeOut is Close's release: best effort, then the lease ends ErrClosed.
func (ls *Lease) closeOut(ctx context.Context) {
	if ls.lockCall(ctx) != nil {
		ls.finish(fmt.Errorf("%w: lease on %q ended by Close (not released: busy)", ErrClosed, ls.Key()))
		return
	}
	defer ls.unlockCall()
	if ls.Err() != nil {
		return
	}
	if err := ls.l.b.Unlock(ctx, ls.unlockGrant()); err != nil && !errors.Is(err, ErrNotHeld) {
		ls.l.log(slog.LevelWarn, "release at close failed; the key frees at its TTL", ls.Key(), err)
	}
	ls.finish(fmt.Errorf("%w: lease on %q ended by Close", ErrClosed, ls.Key()))
}

// expired is the timer that ends the lease at its deadline.
func (ls *Lease) expired() {
	ls.mu.Lock()
	if ls.end != nil {
		ls.mu.Unlock()
		return
	}
	if left := time.Until(ls.deadline); left > 0 {
		ls.expiry.Reset(left) // refreshed since the timer was set
		ls.mu.Unlock()
		return
	}
	ls.mu.Unlock()
	ls.lost("its validity ran out without a successful refresh")
}

// giveBack releases, owner-checked and best effort, a lock whose lease the
// local clock has ended: the server may still hold it for us (a session-
// bound lock would until the session ends, a refresh may have lengthened
// it), and nobody else can use it until it is freed. A call that does not
// reach the server is tried again within the release timeout, so the lock
// is freed soon after a network fault heals. Close interrupts it.
func (ls *Lease) giveBack() {
	ctx, cancel := context.WithTimeout(ls.l.life, ls.o.ReleaseTimeout)
	defer cancel()
	if ls.lockCall(ctx) != nil {
		return
	}
	defer ls.unlockCall()
	answered := func(err error) bool { return err == nil || !transient(err) }
	if err := ls.l.unlockRetrying(ctx, ls.unlockGrant(), answered, lostGiveBackMaxPause); err != nil && !errors.Is(err, ErrNotHeld) {
		ls.l.log(slog.LevelDebug, "giving back a lost lease failed; the server frees it", ls.Key(), err)
	}
}

// lost ends the lease as lost and gives its lock back in the background
// (the caller may hold the call semaphore); it returns the loss error.
func (ls *Lease) lost(why string) error {
	ended, err := ls.endLost(why)
	if ended && ls.l.enter() == nil { // Close waits for the give-back
		go func() {
			defer ls.l.wg.Done()
			ls.giveBack()
		}()
	}
	return err
}

// lostOnServer ends the lease as lost when the server said at its release
// that the lock is no longer ours: that release gave back what there was.
func (ls *Lease) lostOnServer(why string) error {
	_, err := ls.endLost(why)
	return err
}

// endLost ends the lease with a loss error; ended reports whether this call
// ended it (else err is the earlier end).
func (ls *Lease) endLost(why string) (ended bool, err error) {
	err = fmt.Errorf("%w: %q (token %d): %s", ErrLeaseLost, ls.Key(), ls.Token(), why)
	if !ls.finish(err) {
		return false, ls.Err()
	}
	return true, err
}

// finish ends the lease once; it reports whether this call ended it.
func (ls *Lease) finish(end error) bool {
	ls.mu.Lock()
	if ls.end != nil {
		ls.mu.Unlock()
		return false
	}
	ls.end = end
	ls.expiry.Stop()
	if ls.stopLost != nil {
		ls.stopLost()
	}
	fns := ls.onEnd
	ls.onEnd = nil
	ls.mu.Unlock()

	ls.l.forget(ls)
	// Log and observe before Done closes, so whoever wakes on Done finds
	// the event already recorded.
	held := now().Sub(ls.acquired)
	if errors.Is(end, ErrLeaseLost) {
		ls.l.log(slog.LevelWarn, "lease lost", ls.Key(), end)
		ls.l.observe(context.Background(), Event{Kind: EventLost, Key: ls.Key(), Token: ls.Token(), Duration: held, Err: end})
	} else {
		ls.l.observe(context.Background(), Event{Kind: EventReleased, Key: ls.Key(), Token: ls.Token(), Duration: held})
	}
	close(ls.done)
	for _, f := range fns {
		f()
	}
	return true
}

// afterEnd runs f once the lease ends (at once if it has).
func (ls *Lease) afterEnd(f func()) {
	ls.mu.Lock()
	if ls.end == nil {
		ls.onEnd = append(ls.onEnd, f)
		ls.mu.Unlock()
		return
	}
	ls.mu.Unlock()
	f()
}

// nextRenew is when to refresh next: every RenewInterval (TTL/3 by
// default), but never later than halfway to the deadline, so a validity
// shorter than the interval (Redlock, a late grant) is still renewed.
func (ls *Lease) nextRenew() time.Duration {
	return max(min(renewEvery(&ls.o, ls.TTL()), time.Until(ls.Expires())/2), time.Millisecond)
}
