package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
)

// Notifier delivers release notices (the PUBLISH of the release script) to
// waiters. It multiplexes every key's channel over one pub/sub connection,
// opened at the first wait and closed by Close, and counts references per
// channel so a channel is subscribed while anyone waits on it.
//
// Subscribe itself sends nothing: an uncontended Acquire, which subscribes
// before its first attempt, costs no extra round trip. The first Wait sends
// SUBSCRIBE followed by a PING on the same connection; the PONG proves the
// subscription is active, and Wait then returns once without a notice so the
// caller tries again — covering a release that happened before the
// subscription was active. A Subscription created after that sees every
// later notice; one that arrives before Wait is kept for it.
//
// A Notifier implements distlock.Notifier. The backend makes its own; the
// Redlock backend may make one per node with NewNotifier.
type Notifier struct {
	client goredis.UniversalClient
	prefix string

	life context.Context
	stop context.CancelFunc

	mu       sync.Mutex
	ps       *goredis.PubSub // nil until the first Wait
	done     chan struct{}   // closed when the reader goroutine exits
	chans    map[string]*channel
	barriers map[string]*channel // PING payload → channel it confirms
	seq      uint64
	closed   bool
}

// channel is one subscribed (or to-be-subscribed) release channel.
type channel struct {
	name       string
	subs       map[*subscription]struct{}
	subscribed bool          // SUBSCRIBE written on the current connection
	active     bool          // confirmed by a PONG after the SUBSCRIBE
	activeC    chan struct{} // closed when active becomes true
}

// healthEvery is how long the reader waits on a silent connection before it
// PINGs, so a dead connection is noticed and re-established.
const healthEvery = 30 * time.Second

// unsubscribeTimeout bounds the UNSUBSCRIBE that Subscription.Close writes.
const unsubscribeTimeout = time.Second

// NewNotifier returns a Notifier for locks under prefix on client. It does
// not connect until the first Wait.
func NewNotifier(client goredis.UniversalClient, prefix string) *Notifier {
	life, stop := context.WithCancel(context.Background())
	return &Notifier{
		client: client, prefix: prefix, life: life, stop: stop,
		chans: map[string]*channel{}, barriers: map[string]*channel{},
	}
}

// Subscribe starts collecting release notices for key. It implements
// distlock.Notifier and does no I/O.
func (n *Notifier) Subscribe(ctx context.Context, key string) (distlock.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := KeysFor(n.prefix, key).Channel
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("redis notifier: %w", distlock.ErrClosed)
	}
	ch := n.chans[name]
	if ch == nil {
		ch = &channel{name: name, subs: map[*subscription]struct{}{}, activeC: make(chan struct{})}
		n.chans[name] = ch
	}
	s := &subscription{n: n, ch: ch, notice: make(chan struct{}, 1), ready: ch.active}
	ch.subs[s] = struct{}{}
	return s, nil
}

// Close stops the reader and closes the pub/sub connection. Subscriptions
// still open return ErrClosed from Wait.
func (n *Notifier) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.stop()
	ps, done := n.ps, n.done
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close() // unblocks the reader's read
	<-done
	if errors.Is(err, goredis.ErrClosed) {
		err = nil
	}
	return err
}

// startLocked opens the pub/sub connection lazily and starts its reader.
func (n *Notifier) startLocked() {
	if n.ps != nil {
		return
	}
	n.ps = n.client.Subscribe(n.life) // no channels: connects on first use
	n.done = make(chan struct{})
	go n.read(n.ps, n.done)
}

// subscribeLocked writes SUBSCRIBE and a PING barrier for ch.
func (n *Notifier) subscribeLocked(ctx context.Context, ch *channel) error {
	n.startLocked()
	if err := n.ps.Subscribe(ctx, ch.name); err != nil {
		return fmt.Errorf("redis notifier: subscribe: %w", err)
	}
	n.seq++
	id := "distlock-" + strconv.FormatUint(n.seq, 36)
	n.barriers[id] = ch
	if err := n.ps.Ping(ctx, id); err != nil {
		delete(n.barriers, id)
		return fmt.Errorf("redis notifier: ping: %w", err)
	}
	ch.subscribed = true
	return nil
}

// read is the one goroutine of a Notifier: it dispatches messages until
// Close. go-redis reconnects and resubscribes by itself after an error; the
// reader wakes every waiter then, since notices may have been lost.
func (n *Notifier) read(ps *goredis.PubSub, done chan struct{}) {
	defer close(done)
	pause := 10 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(n.life, healthEvery)
		if n.life.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = ps.Ping(n.life) // a write on a dead connection fails and makes go-redis reconnect
				continue
			}
			n.connectionLost()
			// Back off so a down server does not make this loop spin.
			select {
			case <-n.life.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 10 * time.Millisecond
		switch m := msg.(type) {
		case *goredis.Message:
			n.notify(m.Channel)
		case *goredis.Pong:
			n.confirm(m.Payload)
		}
	}
}

func (n *Notifier) notify(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch := n.chans[name]; ch != nil {
		for s := range ch.subs {
			s.wake()
		}
	}
}

func (n *Notifier) confirm(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := n.barriers[id]
	delete(n.barriers, id)
	if ch != nil && ch.subscribed && !ch.active && n.chans[ch.name] == ch {
		ch.active = true
		close(ch.activeC)
	}
}

// connectionLost forgets which channels are active and wakes every waiter:
// notices sent while the connection was down are gone, so each waiter
// retries its lock and then subscribes again.
func (n *Notifier) connectionLost() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.barriers)
	for _, ch := range n.chans {
		ch.subscribed = false
		if !ch.active {
			close(ch.activeC) // wakes first Waits; they see the new channel and retry
		}
		ch.active = false
		ch.activeC = make(chan struct{})
		for s := range ch.subs {
			s.ready = false
			s.wake()
		}
	}
}

// subscription is one waiter's view of a channel.
type subscription struct {
	n      *Notifier
	ch     *channel
	notice chan struct{} // holds at most one pending notice
	ready  bool          // guarded by n.mu: notices since the last attempt reach us
	closed bool          // guarded by n.mu
}

func (s *subscription) wake() {
	select {
	case s.notice <- struct{}{}:
	default:
	}
}

// Wait returns when a release notice arrived, or once right after the
// subscription became active (see Notifier), or when ctx ends.
func (s *subscription) Wait(ctx context.Context) error {
	n := s.n
	n.mu.Lock()
	switch {
	case s.closed:
		n.mu.Unlock()
		return errors.New("redis notifier: subscription closed")
	case n.closed:
		n.mu.Unlock()
		return fmt.Errorf("redis notifier: %w", distlock.ErrClosed)
	}
	if !s.ready {
		ch := s.ch
		if !ch.subscribed {
			if err := n.subscribeLocked(ctx, ch); err != nil {
				n.mu.Unlock()
				return err
			}
		}
		activeC := ch.activeC
		n.mu.Unlock()
		select {
		case <-activeC:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.life.Done():
			return fmt.Errorf("redis notifier: %w", distlock.ErrClosed)
		}
		n.mu.Lock()
		if ch.activeC == activeC { // not reset by a lost connection meanwhile
			s.ready = true
		}
		n.mu.Unlock()
		return nil // the caller retries: a release may predate the subscription
	}
	n.mu.Unlock()
	select {
	case <-s.notice:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.life.Done():
		return fmt.Errorf("redis notifier: %w", distlock.ErrClosed)
	}
}

// Close drops the subscription; the last one on a channel unsubscribes it.
func (s *subscription) Close() error {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	ch := s.ch
	delete(ch.subs, s)
	if len(ch.subs) > 0 {
		return nil
	}
	delete(n.chans, ch.name)
	if !ch.subscribed || n.closed {
		return nil
	}
	ctx, cancel := context.WithTimeout(n.life, unsubscribeTimeout)
	defer cancel()
	if err := n.ps.Unsubscribe(ctx, ch.name); err != nil {
		return fmt.Errorf("redis notifier: unsubscribe: %w", err)
	}
	return nil
}
