package redisnode

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
	"github.com/distlock/distlock/driver"
)

// Notifier delivers release notices (the PUBLISH of the release script) to
// waiters. It multiplexes every key's channel over one pub/sub connection,
// opened at the first wait and closed by Close, and counts references per
// channel so a channel is subscribed while anyone waits on it.
//
// Subscribe itself sends nothing (and an Acquire subscribes only once an
// attempt found the key held). The first Wait queues
// SUBSCRIBE followed by a PING on the same connection; the PONG proves the
// subscription is active, and Wait then returns once without a notice so the
// caller tries again — covering a release that happened before the
// subscription was active. A Subscription created after that sees every
// later notice; one that arrives before Wait is kept for it.
//
// No call does network I/O under the Notifier's lock: one writer goroutine
// sends the queued SUBSCRIBE, PING and UNSUBSCRIBE commands in order, so a
// slow or paused server delays only the waiters of the channels involved,
// each bounded by its own ctx. The reader PINGs a connection that has been
// silent for a while and, when no reply follows, drops and reopens it: a
// half-open connection still accepts writes, so only a missing reply shows
// it is dead.
//
// Notices are best effort. A server that refuses the SUBSCRIBE (an ACL
// without the channels, or without SUBSCRIBE or PING) makes the waiters
// poll: Subscribe and Wait then fail with an error matching
// driver.ErrUnsupported, and the Notifier asks again after deniedRetry.
// The first refusal is reported to the onDenied function given to
// NewNotifier, once.
//
// A Notifier is the release-notice half of driver.Backend: the redis
// backend makes one, the redlock backend one per node.
type Notifier struct {
	client   goredis.UniversalClient
	prefix   string
	onDenied func(error) // told of the first refusal; may be nil

	// healthEvery is how long the reader waits on a silent connection
	// before it PINGs; pongWait is how long it then waits for any reply
	// before it drops the connection as dead.
	healthEvery, pongWait time.Duration

	life context.Context
	stop context.CancelFunc

	mu       sync.Mutex
	ps       *goredis.PubSub // nil until the first Wait
	wg       sync.WaitGroup  // the reader and the writer
	chans    map[string]*channel
	barriers map[string][]op // PING payload → subscriptions it confirms
	queue    []op            // commands for the writer, in order
	kick     chan struct{}   // wakes the writer; holds at most one token
	seq      uint64
	closed   bool
	denied   error     // the server's refusal of notices; nil while they work (or deniedRetry after)
	deniedAt time.Time // when denied was last seen
	told     bool      // onDenied was called
}

// deniedRetry is how long a Notifier whose SUBSCRIBE the server refused
// lets waiters poll before it asks again (a permission may be granted).
const deniedRetry = time.Minute

// channel is one subscribed (or to-be-subscribed) release channel.
type channel struct {
	name       string
	subs       map[*subscription]struct{}
	queued     bool     // a SUBSCRIBE was ever queued: the last Close unsubscribes
	subscribed bool     // SUBSCRIBE queued or written on the current connection
	active     bool     // confirmed by a PONG after the SUBSCRIBE
	attempt    *attempt // the current try at becoming active
}

// attempt is one try at making a channel active. done is closed when a PONG
// confirms it, when its write fails (err is set), or when the connection is
// lost; a lost connection also replaces the channel's attempt.
type attempt struct {
	done chan struct{}
	err  error // guarded by Notifier.mu; set before done is closed
}

func newAttempt() *attempt { return &attempt{done: make(chan struct{})} }

// op is one command for the writer: SUBSCRIBE (with a PING barrier) or
// UNSUBSCRIBE of ch.
type op struct {
	unsubscribe bool
	ch          *channel
	a           *attempt // the attempt a SUBSCRIBE serves
}

// Default health-check timing; see Notifier.healthEvery.
const (
	defaultHealthEvery = 30 * time.Second
	defaultPongWait    = 10 * time.Second
)

// NewNotifier returns a Notifier for locks under prefix on client. It does
// not connect until the first Wait. onDenied, if not nil, is called once,
// with the server's answer, the first time the server refuses notices.
func NewNotifier(client goredis.UniversalClient, prefix string, onDenied func(error)) *Notifier {
	return newNotifier(client, prefix, onDenied, defaultHealthEvery, defaultPongWait)
}

func newNotifier(client goredis.UniversalClient, prefix string, onDenied func(error), healthEvery, pongWait time.Duration) *Notifier {
	life, stop := context.WithCancel(context.Background())
	return &Notifier{
		client: client, prefix: prefix, onDenied: onDenied, healthEvery: healthEvery, pongWait: pongWait,
		life: life, stop: stop,
		chans: map[string]*channel{}, barriers: map[string][]op{},
		kick: make(chan struct{}, 1),
	}
}

// Subscribe starts collecting release notices for key. It implements
// driver.Backend.Subscribe and does no I/O.
func (n *Notifier) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	return n.SubscribeWaiter(ctx, key, "")
}

// SubscribeWaiter is Subscribe for one waiter of a fair queue: it hears
// the notices of the waiter's own channel (Keys.WaiterChannel), where the
// release and dequeue scripts tell the first waiter its turn has come, so
// that a hand-off wakes one connection, not every waiter's. It implements
// driver.Backend.SubscribeWaiter.
func (n *Notifier) SubscribeWaiter(ctx context.Context, key, waiter string) (driver.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := KeysFor(n.prefix, key).Channel
	if waiter != "" {
		name = KeysFor(n.prefix, key).WaiterChannel(waiter)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("redis notifier: %w", distlock.ErrClosed)
	}
	if err := n.deniedLocked(); err != nil {
		return nil, err
	}
	ch := n.chans[name]
	if ch == nil {
		ch = &channel{name: name, subs: map[*subscription]struct{}{}, attempt: newAttempt()}
		n.chans[name] = ch
	}
	s := &subscription{n: n, ch: ch, notice: make(chan struct{}, 1), ready: ch.active}
	ch.subs[s] = struct{}{}
	return s, nil
}

// Close stops the reader and the writer and closes the pub/sub connection.
// Subscriptions still open return ErrClosed from Wait.
func (n *Notifier) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.stop()
	ps := n.ps
	n.queue = nil
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close() // unblocks the reader's read and the writer's write
	n.wg.Wait()
	if errors.Is(err, goredis.ErrClosed) {
		err = nil
	}
	return err
}

// enqueueLocked hands o to the writer, opening the pub/sub connection and
// starting the reader and writer at the first call. It never blocks.
func (n *Notifier) enqueueLocked(o op) {
	if n.ps == nil {
		n.ps = n.client.Subscribe(n.life) // no channels: connects on first use
		n.wg.Add(2)
		go n.read(n.ps)
		go n.write(n.ps)
	}
	n.queue = append(n.queue, o)
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// write sends queued commands in queue order until Close. Runs of
// SUBSCRIBEs go out as one command followed by one PING barrier.
func (n *Notifier) write(ps *goredis.PubSub) {
	defer n.wg.Done()
	for {
		select {
		case <-n.life.Done():
			return
		case <-n.kick:
		}
		n.mu.Lock()
		ops := n.queue
		n.queue = nil
		n.mu.Unlock()
		for len(ops) > 0 && n.life.Err() == nil {
			j := 1
			for j < len(ops) && ops[j].unsubscribe == ops[0].unsubscribe {
				j++
			}
			n.send(ps, ops[:j])
			ops = ops[j:]
		}
	}
}

// send writes one run of ops of the same kind.
func (n *Notifier) send(ps *goredis.PubSub, ops []op) {
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = o.ch.name
	}
	if ops[0].unsubscribe {
		// go-redis forgets the channels even if the write fails, so a
		// reconnect does not subscribe them again.
		_ = ps.Unsubscribe(n.life, names...)
		return
	}
	if err := ps.Subscribe(n.life, names...); err != nil {
		n.failed(ops, fmt.Errorf("redis notifier: subscribe: %w", err))
		return
	}
	n.mu.Lock()
	n.seq++
	id := "distlock-" + strconv.FormatUint(n.seq, 36)
	n.barriers[id] = ops
	n.mu.Unlock()
	if err := ps.Ping(n.life, id); err != nil {
		n.mu.Lock()
		delete(n.barriers, id)
		n.mu.Unlock()
		n.failed(ops, fmt.Errorf("redis notifier: ping: %w", err))
	}
}

// failed ends the still-current attempts of ops with err, so their waiters
// fall back to polling instead of waiting for a PONG that will not come.
func (n *Notifier) failed(ops []op, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, o := range ops {
		ch := o.ch
		if ch.attempt != o.a || ch.active {
			continue
		}
		o.a.err = err
		close(o.a.done)
		ch.subscribed = false
		ch.attempt = newAttempt()
	}
}

// read dispatches messages until Close. go-redis reconnects and
// resubscribes by itself after an error; the reader wakes every waiter then,
// since notices may have been lost.
func (n *Notifier) read(ps *goredis.PubSub) {
	defer n.wg.Done()
	pause := 10 * time.Millisecond
	pinged := false // a health PING is unanswered
	for {
		var msg any
		var err error
		if !pinged {
			msg, err = ps.ReceiveTimeout(n.life, n.healthEvery)
		} else {
			// Receive with a ctx deadline rather than a timeout: go-redis
			// then treats a timeout as a bad connection and reconnects.
			ctx, cancel := context.WithTimeout(n.life, n.pongWait)
			msg, err = ps.Receive(ctx)
			cancel()
		}
		if n.life.Err() != nil {
			return
		}
		if err != nil && Denied(err) {
			// An answer, on a live connection: the server refuses this
			// client its notices (or its login).
			pinged = false
			n.deny(err)
			if !n.pause(&pause) {
				return
			}
			continue
		}
		if err != nil {
			var ne net.Error
			if !pinged && errors.As(err, &ne) && ne.Timeout() {
				// Silent for healthEvery: only a reply proves the connection
				// is alive, since writes to a half-open one succeed.
				pinged = ps.Ping(n.life, "distlock-health") == nil
				continue
			}
			pinged = false
			n.connectionLost()
			if !n.pause(&pause) {
				return
			}
			continue
		}
		pinged = false
		pause = 10 * time.Millisecond
		switch m := msg.(type) {
		case *goredis.Message:
			n.notify(m.Channel)
		case *goredis.Pong:
			n.confirm(m.Payload)
		}
	}
}

// pause backs the reader off after an error, so that a down server does
// not make it spin, doubling *d up to a second; false once the Notifier is
// closed.
func (n *Notifier) pause(d *time.Duration) bool {
	select {
	case <-n.life.Done():
		return false
	case <-time.After(*d):
	}
	*d = min(2**d, time.Second)
	return true
}

// deny records the server's refusal of notices: the channels not active
// yet give up, so their waiters poll, and onDenied hears of it the first
// time. Active channels keep their notices.
func (n *Notifier) deny(err error) {
	n.mu.Lock()
	n.denied, n.deniedAt = err, time.Now()
	tell := !n.told
	n.told = true
	quiet := n.deniedLocked()
	clear(n.barriers) // a PONG after the refused SUBSCRIBE confirms nothing
	for _, ch := range n.chans {
		if ch.active {
			continue
		}
		ch.subscribed = false
		ch.attempt.err = quiet
		close(ch.attempt.done)
		ch.attempt = newAttempt()
	}
	n.mu.Unlock()
	if tell && n.onDenied != nil {
		n.onDenied(err)
	}
}

// deniedLocked is the error of Subscribe and Wait while the server refuses
// notices (until deniedRetry after its last refusal), nil otherwise.
func (n *Notifier) deniedLocked() error {
	if n.denied == nil {
		return nil
	}
	if time.Since(n.deniedAt) >= deniedRetry {
		n.denied = nil
		return nil
	}
	return fmt.Errorf("%w: redis notifier: release notices refused, polling instead: %w", driver.ErrUnsupported, n.denied)
}

// notify wakes the subscriptions of channel name.
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
	ops := n.barriers[id]
	delete(n.barriers, id)
	for _, o := range ops {
		ch := o.ch
		if ch.attempt == o.a && ch.subscribed && !ch.active && n.chans[ch.name] == ch {
			ch.active = true
			close(o.a.done)
		}
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
			close(ch.attempt.done) // wakes first Waits; they see the new attempt and retry
		}
		ch.active = false
		ch.attempt = newAttempt()
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
		if err := n.deniedLocked(); err != nil {
			n.mu.Unlock()
			return err
		}
		ch := s.ch
		if !ch.subscribed {
			n.enqueueLocked(op{ch: ch, a: ch.attempt})
			ch.subscribed, ch.queued = true, true
		}
		a := ch.attempt
		n.mu.Unlock()
		select {
		case <-a.done:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.life.Done():
			return fmt.Errorf("redis notifier: %w", distlock.ErrClosed)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if a.err != nil {
			return a.err
		}
		if ch.attempt == a { // not reset by a lost connection meanwhile
			s.ready = true
		}
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

// Close drops the subscription; the last one on a channel has the writer
// unsubscribe it. Close does no I/O itself.
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
	if ch.queued && !n.closed {
		n.enqueueLocked(op{unsubscribe: true, ch: ch})
	}
	return nil
}
