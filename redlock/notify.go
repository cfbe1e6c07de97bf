package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"github.com/distlock/distlock/driver"
)

// Subscribe implements driver.Backend: it subscribes to key's release
// notices on every node (no I/O until the first Wait). A release publishes
// on each node that held the lock, so a notice from any node wakes the
// waiter (but see SubscribeWaiter).
func (b *backend) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	return b.subscribe(ctx, key)
}

// SubscribeWaiter implements driver.Backend.SubscribeWaiter: the subscription of
// a waiting Acquire, which its attempts can reach (waitingFor) to mute the
// nodes of their own give-backs.
func (b *backend) SubscribeWaiter(ctx context.Context, key, waiter string) (driver.Subscription, error) {
	s, err := b.subscribe(ctx, key)
	if err != nil {
		return nil, err
	}
	id := waiterID{key, waiter}
	s.unregister = func() {
		b.waitingMu.Lock()
		defer b.waitingMu.Unlock()
		if b.waiting[id] == s {
			delete(b.waiting, id)
		}
	}
	b.waitingMu.Lock()
	defer b.waitingMu.Unlock()
	if b.waiting == nil {
		b.waiting = make(map[waiterID]*subscription)
	}
	b.waiting[id] = s
	return s, nil
}

type waiterID struct{ key, waiter string }

// waitingFor is the subscription of req's waiting Acquire, nil when it
// has none (yet) or req is a TryAcquire's.
func (b *backend) waitingFor(req driver.Request) *subscription {
	if req.Waiter == "" {
		return nil
	}
	b.waitingMu.Lock()
	defer b.waitingMu.Unlock()
	return b.waiting[waiterID{req.Key, req.Waiter}]
}

func (b *backend) subscribe(ctx context.Context, key string) (*subscription, error) {
	s := &subscription{sig: make(chan struct{}, 1)}
	for i, nd := range b.nodes {
		ns, err := nd.notifier.Subscribe(ctx, key)
		if err != nil {
			for _, ns := range s.subs {
				_ = ns.Close()
			}
			return nil, fmt.Errorf("redlock: subscribe on node %d: %w", i, err)
		}
		s.subs = append(s.subs, ns)
	}
	s.failing = make([]error, len(s.subs))
	s.muted = make([]bool, len(s.subs))
	return s, nil
}

// subscription merges the nodes' subscriptions. One goroutine per node
// (started by the first Wait, stopped by Close) pulls that node's notices as
// they come and stamps them; Wait returns for a notice stamped after its
// previous return. One release publishes on every node it held, and the
// retry that follows a Wait covers every release before that return, so the
// burst's other copies are dropped instead of causing a retry each.
type subscription struct {
	subs []driver.Subscription
	sig  chan struct{} // a pump has news (holds at most one)

	mu         sync.Mutex
	started    bool
	closed     bool
	stop       context.CancelFunc
	wg         sync.WaitGroup
	lastNotice time.Time // when a pump last got a notice (or activation)
	lastReturn time.Time // when Wait last returned nil
	failing    []error   // per node: the error of its last Wait, nil when fine
	// muted[i]: node i's notices do not wake the waiter (see mute).
	muted      []bool
	unregister func() // set by SubscribeWaiter
}

// mute makes the notices of nodes (and only those) stop waking the waiter,
// until the next call. An attempt lost to "held" answers alone (the nodes
// it did not hear from could not have made its quorum) mutes the nodes it
// took and gave back, and those it left unread (they may yet say yes and
// be given back): their notices are its own give-backs (and its own
// wake-up on them, at once, was a spin for as long as the key was held),
// and nothing on them can change the vote. Only a change on a node that
// said "held" can: a release there still wakes the waiter; an expiry, or
// a key deleted without a release, is found by the next Wait ending within
// mutedPoll. Safety does not depend on notices: they only say when to try.
func (s *subscription) mute(nodes []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.muted)
	for _, i := range nodes {
		s.muted[i] = true
	}
}

// pumpBackoff bounds how often a pump retries a node whose subscription
// fails (down, refusing connections).
const (
	pumpBackoffMin = 50 * time.Millisecond
	pumpBackoffMax = time.Second
)

func (s *subscription) pump(life context.Context, i int) {
	defer s.wg.Done()
	pause := pumpBackoffMin
	for {
		err := s.subs[i].Wait(life)
		if life.Err() != nil {
			return
		}
		s.mu.Lock()
		s.failing[i] = err
		muted := err == nil && s.muted[i]
		if err == nil && !muted {
			s.lastNotice = time.Now()
		}
		s.mu.Unlock()
		if muted {
			continue
		}
		select {
		case s.sig <- struct{}{}:
		default:
		}
		if err == nil {
			pause = pumpBackoffMin
			continue
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-life.Done():
			t.Stop()
			return
		}
		pause = min(2*pause, pumpBackoffMax)
	}
}

// Wait returns nil when a node sent a release notice (or a node's
// subscription became active, after which the caller should try again, as
// in package redis) since the previous return, after a short random delay
// (see wakeJitter). Nodes whose subscription fails are ignored while
// others still work; Wait fails only when every node fails.
func (s *subscription) Wait(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("redlock: subscription closed")
	}
	if !s.started {
		s.started = true
		life, stop := context.WithCancel(context.Background())
		s.stop = stop
		for i := range s.subs {
			s.wg.Add(1)
			go s.pump(life, i)
		}
	}
	paced := slices.Contains(s.muted, true)
	s.mu.Unlock()
	var pace <-chan time.Time
	if paced {
		t := time.NewTimer(mutedPoll/2 + rand.N(mutedPoll/2))
		defer t.Stop()
		pace = t.C
	}
	for {
		s.mu.Lock()
		if s.lastNotice.After(s.lastReturn) {
			s.mu.Unlock()
			if err := spread(ctx); err != nil {
				return err
			}
			s.mu.Lock()
			s.lastReturn = time.Now()
			s.mu.Unlock()
			return nil
		}
		var errs []error
		for _, err := range s.failing {
			if err != nil {
				errs = append(errs, err)
			}
		}
		s.mu.Unlock()
		if len(errs) == len(s.subs) {
			return fmt.Errorf("redlock: release notices: %w", errors.Join(errs...))
		}
		select {
		case <-s.sig:
		case <-pace:
			s.mu.Lock()
			s.lastReturn = time.Now()
			s.mu.Unlock()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the pumps, then ends every node's subscription.
func (s *subscription) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop := s.stop
	s.mu.Unlock()
	if s.unregister != nil {
		s.unregister()
	}
	if stop != nil {
		stop()
	}
	s.wg.Wait()
	var errs []error
	for _, ns := range s.subs {
		if err := ns.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mutedPoll bounds a Wait while nodes are muted: it returns by then as if
// notified. A "held" node can also become free without a notice (a key
// deleted by hand, a FLUSHALL, eviction); the portable layer's fallback
// poll alone would find that seconds late, while the spin on its own
// give-backs that muting stops found it at once but cost hundreds of
// attempts a second. This keeps it to a few attempts a second.
const mutedPoll = 500 * time.Millisecond

// wakeJitter bounds the random delay between a release notice and the
// return of Wait. A release wakes every waiter at once, and waiters that
// all try at once split the nodes' votes so that nobody gets a majority
// (and their give-backs wake everyone again). Spreading the wake-ups over a
// few round trips lets the first one win cleanly. The portable layer adds
// no jitter after a notice, so it is done here.
const wakeJitter = 3 * time.Millisecond

func spread(ctx context.Context) error { return clock.Sleep(ctx, rand.N(wakeJitter)) }
