package memory

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
)

func init() {
	driver.Register("mem", func(ctx context.Context, u *url.URL, opts []driver.Option) (driver.Backend, error) {
		if err := urlparam.NewQuery(u).Done(); err != nil {
			return nil, err
		}
		o, err := driver.ResolveBackend("memory", opts)
		if err != nil {
			return nil, err
		}
		return NewBackend(driver.BackendValueOr[*Store](o, storeKey{}, Named(u.Host))), nil
	})
}

// Store holds the locks and token counters: the "server" of this backend.
type Store struct {
	mu       sync.Mutex
	locks    map[string]*hold
	counters map[string]distlock.Token // per key while the clock has not passed it (see drop)
	last     distlock.Token            // the last token handed out, for any key
	freed    map[string]chan struct{}  // closed and replaced at each release or expiry
	changed  map[string]chan struct{}  // closed and replaced at each grant, release or expiry
}

type hold struct {
	owner   string
	value   string
	token   distlock.Token
	expires time.Time
	timer   *time.Timer
	lost    context.Context // done when the store drops the hold (expiry)
	setLost context.CancelFunc
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{locks: map[string]*hold{}, counters: map[string]distlock.Token{}, freed: map[string]chan struct{}{},
		changed: map[string]chan struct{}{}}
}

var (
	namedMu sync.Mutex
	named   = map[string]*Store{}
)

// Named returns the process-wide Store of that name ("" is the default).
func Named(name string) *Store {
	namedMu.Lock()
	defer namedMu.Unlock()
	s := named[name]
	if s == nil {
		s = NewStore()
		named[name] = s
	}
	return s
}

type storeKey struct{}

// Option is an option of this backend, for its New, NewBackend and Open
// with a mem:// URL; it is a distlock.Option, which single calls do not take.
type Option struct{ o driver.Option }

// DriverOption returns the setting.
func (o Option) DriverOption() driver.Option { return o.o }

// WithStore makes the Locker use s (default: a new private Store).
func WithStore(s *Store) Option {
	if s == nil {
		return Option{driver.InvalidOption("memory: nil store")}
	}
	return Option{driver.BackendOption("memory", "WithStore", storeKey{}, s)}
}

// New returns a Locker on an in-process Store.
func New(opts ...distlock.Option) (distlock.Locker, error) {
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	o, err := driver.ResolveBackend("memory", backendOpts)
	if err != nil {
		return nil, err
	}
	s := driver.BackendValueOr[*Store](o, storeKey{}, NewStore())
	return distlock.New(NewBackend(s), lockerOpts...)
}

// NewBackend returns the raw Backend on s, for wrapping (tests, middleware).
func NewBackend(s *Store) driver.Backend { return &backend{s: s} }

// ForceExpire drops key's lock as if its TTL had run out, and reports
// whether it was held. Tests use it to emulate a server-side expiry.
func (s *Store) ForceExpire(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.locks[key]
	if h == nil {
		return false
	}
	s.drop(key, h, true)
	return true
}

// Held reports whether key is held now.
func (s *Store) Held(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.locks[key] != nil
}

// drop removes a hold and wakes waiters; s.mu must be held.
func (s *Store) drop(key string, h *hold, lost bool) {
	h.timer.Stop()
	delete(s.locks, key)
	if s.counters[key] < nowMicros() {
		// The clock has passed the counter: the next token comes from the
		// clock and is larger anyway, so the key leaves nothing behind.
		delete(s.counters, key)
	}
	if lost {
		h.setLost()
	}
	notify(s.freed, key)
	notify(s.changed, key)
}

// notify closes and forgets key's channel in m, waking its readers.
func notify(m map[string]chan struct{}, key string) {
	if ch := m[key]; ch != nil {
		close(ch)
		delete(m, key)
	}
}

// next returns the channel of m closed at key's next notice; s.mu held.
func next(m map[string]chan struct{}, key string) chan struct{} {
	ch := m[key]
	if ch == nil {
		ch = make(chan struct{})
		m[key] = ch
	}
	return ch
}

type backend struct {
	driver.Unsupported
	s *Store
}

func (b *backend) Guarantees() driver.Guarantees {
	return driver.Guarantees{
		Backend:       "memory",
		TokenSource:   "per-key counter in process memory, advanced to max(counter+1, wall clock in µs)",
		Wait:          driver.WaitNotify,
		SingleProcess: true,
		Notes: []string{
			"locks are visible only inside this process",
			"tokens keep increasing across restarts of the process while its wall clock does not step back by more than a restart takes",
		},
	}
}

func (b *backend) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.locks[req.Key]; h != nil {
		return driver.Grant{}, &distlock.HeldError{Key: req.Key, RetryAfter: time.Until(h.expires)}
	}
	// max(counter + 1, the wall clock in µs): a restarted process, whose
	// counters start empty, still hands out larger tokens than before. Past
	// the Store's last token too: a counter dropped (see drop) must not let
	// a clock stepped back hand out a smaller one.
	tok := max(s.counters[req.Key]+1, nowMicros(), s.last+1)
	s.counters[req.Key], s.last = tok, tok
	h := &hold{owner: req.Owner, value: req.Value, token: s.counters[req.Key], expires: time.Now().Add(req.TTL)}
	h.lost, h.setLost = context.WithCancel(context.Background())
	key := req.Key
	h.timer = time.AfterFunc(req.TTL, func() { s.expire(key, h) })
	s.locks[key] = h
	notify(s.changed, key)
	return driver.Grant{Token: int64(h.token), Lost: h.lost}, nil
}

// expire is the TTL timer: it drops h unless h was refreshed or replaced.
func (s *Store) expire(key string, h *hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locks[key] == h && !time.Now().Before(h.expires) {
		s.drop(key, h, true)
	}
}

// owned returns the key's hold if g owns it; s.mu must be held.
func (s *Store) owned(g driver.Grant) *hold {
	if h := s.locks[g.Key]; h != nil && h.owner == g.Owner {
		return h
	}
	return nil
}

func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.owned(g)
	if h == nil {
		return 0, distlock.ErrNotHeld
	}
	h.expires = time.Now().Add(ttl)
	h.timer.Reset(ttl)
	return ttl, nil
}

func (b *backend) Unlock(ctx context.Context, g driver.Grant) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.owned(g)
	if h == nil {
		return distlock.ErrNotHeld
	}
	s.drop(g.Key, h, false)
	return nil
}

func (b *backend) Close() error { return nil }

// Subscribe gives in-process release notices.
func (b *backend) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	return b.s.subscribe(b.s.freed, key), nil
}

// Watch gives in-process notices of every change of key's holder.
func (b *backend) Watch(ctx context.Context, key string) (driver.Subscription, error) {
	return b.s.subscribe(b.s.changed, key), nil
}

// Inspect reads key's hold.
func (b *backend) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	if err := ctx.Err(); err != nil {
		return driver.Holder{}, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.locks[key]
	if h == nil {
		return driver.Holder{Waiters: -1}, nil
	}
	return driver.Holder{Held: true, Token: int64(h.token), Value: h.value, TTL: time.Until(h.expires), Waiters: -1}, nil
}

func (s *Store) subscribe(m map[string]chan struct{}, key string) *subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &subscription{s: s, m: m, key: key, ch: next(m, key)}
}

type subscription struct {
	s   *Store
	m   map[string]chan struct{} // the Store's freed or changed
	key string
	ch  chan struct{}
}

func (sub *subscription) Wait(ctx context.Context) error {
	select {
	case <-sub.ch:
		sub.s.mu.Lock()
		sub.ch = next(sub.m, sub.key)
		sub.s.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (sub *subscription) Close() error { return nil }

// As gives access to the Store: target must be a **Store.
func (b *backend) As(target any) bool {
	if p, ok := target.(**Store); ok {
		*p = b.s
		return true
	}
	return false
}

// nowMicros is the wall clock in µs, the floor of every token.
func nowMicros() distlock.Token { return distlock.Token(time.Now().UnixMicro()) }
