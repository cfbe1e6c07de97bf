package postgres

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// listener is the one LISTEN connection of a backend: it is made at the
// first Subscribe and wakes the subscriptions of each released key. When
// it breaks, every subscription's Wait fails (its waiter polls) and the
// next Subscribe connects again.
type listener struct {
	cfg     *pgx.ConnConfig
	channel func(context.Context) (string, error) // names the table's channel
	life    context.Context                       // ended by close
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu   sync.Mutex
	subs map[string]map[*subscription]struct{} // by key
	cur  *connection                           // nil until a Subscribe, and after a break
}

// connection is one try of the LISTEN connection.
type connection struct {
	ready chan struct{} // closed once LISTEN ran, or failed (err)
	err   error         // written before ready closes
}

type subscription struct {
	l      *listener
	key    string
	notice chan struct{} // one pending notice
	broken chan struct{} // closed when the connection broke
	err    error         // written before broken closes
}

func newListener(cfg *pgx.ConnConfig, channel func(context.Context) (string, error)) *listener {
	life, stop := context.WithCancel(context.Background())
	return &listener{cfg: cfg, channel: channel, life: life, stop: stop, subs: map[string]map[*subscription]struct{}{}}
}

func (l *listener) subscribe(ctx context.Context, key string) (*subscription, error) {
	s := &subscription{l: l, key: key, notice: make(chan struct{}, 1), broken: make(chan struct{})}
	l.mu.Lock()
	if l.life.Err() != nil {
		l.mu.Unlock()
		return nil, errors.New("postgres: backend closed")
	}
	if l.subs[key] == nil {
		l.subs[key] = map[*subscription]struct{}{}
	}
	l.subs[key][s] = struct{}{}
	c := l.cur
	if c == nil {
		c = &connection{ready: make(chan struct{})}
		l.cur = c
		l.wg.Add(1)
		go l.run(c)
	}
	l.mu.Unlock()
	select {
	case <-c.ready:
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	}
	if c.err != nil {
		s.Close()
		return nil, c.err
	}
	return s, nil
}

// run connects, listens and dispatches notices until the connection
// breaks or the listener closes.
func (l *listener) run(c *connection) {
	defer l.wg.Done()
	channel, err := l.channel(l.life)
	var conn *pgx.Conn
	if err == nil {
		conn, err = pgx.ConnectConfig(l.life, l.cfg)
	}
	if err == nil {
		_, err = conn.Exec(l.life, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	}
	c.err = err
	close(c.ready)
	if conn != nil {
		defer conn.Close(context.Background())
	}
	for err == nil {
		var n *pgconn.Notification
		n, err = conn.WaitForNotification(l.life)
		if err == nil {
			l.wake(n.Payload)
		}
	}
	l.broke(c, err)
}

func (l *listener) wake(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[key] {
		select {
		case s.notice <- struct{}{}:
		default: // one pending notice is enough
		}
	}
}

// broke fails every subscription of c and lets the next Subscribe connect.
func (l *listener) broke(c *connection, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == c {
		l.cur = nil
	}
	for _, subs := range l.subs {
		for s := range subs {
			s.err = err
			close(s.broken)
		}
	}
	clear(l.subs)
}

func (l *listener) close() {
	l.stop()
	l.wg.Wait()
}

func (s *subscription) Wait(ctx context.Context) error {
	select {
	case <-s.notice:
		return nil
	case <-s.broken:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *subscription) Close() error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if subs := s.l.subs[s.key]; subs != nil {
		delete(subs, s)
		if len(subs) == 0 {
			delete(s.l.subs, s.key)
		}
	}
	return nil
}
