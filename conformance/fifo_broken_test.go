package conformance_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// waitStacks is the "server" of lastComeFirst: per key, the waiting calls,
// newest last.
type waitStacks struct {
	mu   sync.Mutex
	keys map[string][]string
}

func (s *waitStacks) push(key, id string) {
	s.mu.Lock()
	s.keys[key] = append(s.keys[key], id)
	s.mu.Unlock()
}

func (s *waitStacks) remove(key, id string) {
	s.mu.Lock()
	s.keys[key] = slices.DeleteFunc(s.keys[key], func(w string) bool { return w == id })
	s.mu.Unlock()
}

// top reports whether id is the newest waiter of key, and how many wait.
func (s *waitStacks) top(key, id string) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.keys[key]
	return len(w) > 0 && w[len(w)-1] == id, len(w)
}

// lastComeFirst claims FIFO, and counts its waiters as a queue does, but
// serves them newest first.
type lastComeFirst struct {
	driver.Backend
	waiting *waitStacks
}

func (b lastComeFirst) Guarantees() driver.Guarantees {
	g := b.Backend.Guarantees()
	g.Wait, g.FIFO = driver.WaitQueue, true
	return g
}

func (b lastComeFirst) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	b.waiting.push(req.Key, req.Owner)
	defer b.waiting.remove(req.Key, req.Owner)
	for {
		if mine, _ := b.waiting.top(req.Key, req.Owner); mine {
			g, err := b.TryLock(ctx, req)
			if !errors.Is(err, distlock.ErrNotAcquired) {
				return g, err
			}
		}
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-time.After(5 * time.Millisecond): // a test double; real backends wait on the server
		}
	}
}

func (b lastComeFirst) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	h, err := b.Backend.Inspect(ctx, key)
	_, h.Waiters = b.waiting.top(key, "")
	return h, err
}
