package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Watching: see "Inspect and Watch" in docs/backends/zookeeper.md. A
// subscription waits on a watch of the key directory, set by a read of it:
// a child watch while the directory exists, an exist watch while it does
// not. A ZooKeeper watch fires once, at the first change after its read;
// Wait then reads the directory again with a new watch, before it returns,
// so that no change falls between two watches, and returns only if the two
// reads show that the holder may have changed: a waiter joining or leaving
// the queue wakes nobody.

// dirState is what one read of a key directory tells of its lock.
type dirState struct {
	exists   bool
	czxid    int64  // the directory's creation: tells its incarnations apart
	cversion int32  // counts the creations and deletions of its children
	holder   string // its lowest lock znode; "" if none
}

// sameHolder reports whether the key's holder is certain not to have
// changed between a read that saw a and a later one that saw c.
func sameHolder(a, c dirState) bool {
	switch {
	case a.holder != "":
		// One znode lowest at both reads was the holder throughout: it
		// existed (a znode's name is not reused in a directory's life),
		// and a znode created meanwhile has a larger sequence.
		return c.exists && c.czxid == a.czxid && c.holder == a.holder
	case c.holder != "":
		return false
	case a.exists:
		// Free at both reads, and no child created in between.
		return c.exists && c.czxid == a.czxid && c.cversion == a.cversion
	default:
		// The directory was missing: whatever was made of it between its
		// creation and the read may be gone (even reaped and recreated).
		return false
	}
}

// dirWatch is a watch on a key directory and what the read that set it
// saw: ch fires at the first change after that read, or when the session's
// watches are dropped (its expiry, the connection's Close).
type dirWatch struct {
	ch <-chan zk.Event
	st dirState
}

// fired reports whether w's watch has fired. go-zookeeper sends one event
// and closes the channel at once, so every reader sees it fire.
func (w dirWatch) fired() bool {
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

// watchHub keeps the newest watch of each key directory that has not
// fired, shared by the backend's subscriptions. Neither go-zookeeper nor
// the server can drop a watch before it fires (the server keeps it until
// then or the session's end), so a subscription closed while its watch is
// set leaves it behind; sharing bounds that to about one watch per key
// directory, however many subscriptions come and go.
type watchHub struct {
	mu      sync.Mutex
	dirs    map[string]dirWatch
	sweepAt int // the size at which put drops the fired watches
}

func (h *watchHub) get(dir string) (dirWatch, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.dirs[dir]
	if ok && w.fired() {
		delete(h.dirs, dir)
		return dirWatch{}, false
	}
	return w, ok
}

func (h *watchHub) put(dir string, w dirWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dirs == nil {
		h.dirs = make(map[string]dirWatch)
	}
	h.dirs[dir] = w
	if len(h.dirs) >= h.sweepAt {
		for d, x := range h.dirs {
			if x.fired() {
				delete(h.dirs, d)
			}
		}
		h.sweepAt = max(2*len(h.dirs), 64)
	}
}

// watchTries bounds the reads of a directory that keeps appearing and
// vanishing between its listing and its exist watch.
const watchTries = 3

// arm returns a watch on dir: the hub's, if it has not fired (no round
// trip), else a new one. The read runs in one goroutine, which hands its
// watch to the hub even if ctx ends first.
func (b *backend) arm(ctx context.Context, conn *zk.Conn, dir string) (dirWatch, error) {
	if w, ok := b.hub.get(dir); ok {
		return w, nil
	}
	return call(b, ctx, func() (dirWatch, error) {
		b.dirWatchReads.Add(1)
		w, err := readWatch(conn, dir)
		if err == nil {
			b.hub.put(dir, w)
		}
		return w, err
	})
}

// readWatch lists dir with a child watch or, if it is missing, sets an
// exist watch on it.
func readWatch(conn *zk.Conn, dir string) (dirWatch, error) {
	for range watchTries {
		children, st, ch, err := conn.ChildrenW(dir)
		if err == nil {
			return dirWatch{ch: ch, st: dirState{exists: true, czxid: st.Czxid, cversion: st.Cversion, holder: lowest(children)}}, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return dirWatch{}, fmt.Errorf("zookeeper: watch %s: %w", dir, err)
		}
		ok, _, ch, err := conn.ExistsW(dir)
		if err != nil {
			return dirWatch{}, fmt.Errorf("zookeeper: watch %s: %w", dir, err)
		}
		if !ok {
			return dirWatch{ch: ch}, nil
		}
		// Created since the listing: the exist watch is a data watch on
		// the directory now, which its deletion ends; list it again.
	}
	return dirWatch{}, fmt.Errorf("zookeeper: watch %s: it appeared and vanished %d times", dir, watchTries)
}

// Watch implements driver.Backend.Watch: notices of every change of key's holder,
// from a watch on its directory. It costs one round trip (two while the
// directory is missing), none if another subscription of the Locker has
// a watch on it set.
func (b *backend) Watch(ctx context.Context, key string) (driver.Subscription, error) {
	conn := b.conn.Load()
	dir := b.base + "/" + escapeKey(key)
	w, err := b.arm(ctx, conn, dir)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, b.classify(err)
	}
	return &subscription{b: b, conn: conn, dir: dir, w: w, closed: make(chan struct{})}, nil
}

// errSubscriptionClosed ends a Wait on a closed subscription.
var errSubscriptionClosed = errors.New("zookeeper: subscription closed")

// subscription is a Watch: it runs no goroutine, only Wait's reads.
type subscription struct {
	b      *backend
	conn   *zk.Conn
	dir    string
	w      dirWatch // w.ch is nil once it fired, until the next read
	closed chan struct{}
	once   sync.Once
}

// Wait returns nil once the holder may have changed since the previous
// Wait returned nil (or since Watch), ctx's error if ctx ends first, or
// the error of a read that failed for good (the backend closed), after
// which the caller should poll.
func (s *subscription) Wait(ctx context.Context) error {
	for {
		select {
		case <-s.closed:
			return errSubscriptionClosed
		default:
		}
		if s.w.ch == nil {
			w, err := s.rearm(ctx)
			switch {
			case err == nil:
			case ctx.Err() != nil:
				return ctx.Err() // the next Wait reads again and compares
			default:
				return s.b.classify(err)
			}
			changed := !sameHolder(s.w.st, w.st)
			s.w = w
			if changed {
				return nil
			}
		}
		select {
		case <-s.w.ch:
			s.w.ch = nil // keep st: the next read is compared with it
			s.b.dirWatchFires.Add(1)
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return errSubscriptionClosed
		case <-s.b.quit:
			return fmt.Errorf("%w: zookeeper: watch on %s", distlock.ErrClosed, s.dir)
		}
	}
}

// rearm reads the directory again with a watch. While the connection is
// down it tries again until ctx ends: go-zookeeper fails the requests
// queued while it reconnects (ErrNoServer each time it has tried every
// server), which a session's expiry, firing the watch, is followed by.
func (s *subscription) rearm(ctx context.Context) (dirWatch, error) {
	delay := rearmRetryMin
	for {
		w, err := s.b.arm(ctx, s.conn, s.dir)
		if err == nil || ctx.Err() != nil || !reconnecting(err) {
			return w, err
		}
		select {
		case <-s.closed:
			return dirWatch{}, errSubscriptionClosed
		case <-s.b.quit:
			return dirWatch{}, fmt.Errorf("%w: zookeeper: watch on %s", distlock.ErrClosed, s.dir)
		default:
		}
		if err := clock.Sleep(ctx, delay); err != nil {
			return dirWatch{}, err
		}
		delay = min(2*delay, rearmRetryMax)
	}
}

// The pause between two reads of rearm while the connection is down.
const (
	rearmRetryMin = 10 * time.Millisecond
	rearmRetryMax = time.Second
)

// reconnecting reports whether err is go-zookeeper's failure of a request
// while it reconnects (or makes a new session), rather than a lasting one.
func reconnecting(err error) bool {
	return errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionExpired)
}

// Close ends the subscription. Its watch, if set, stays with the server
// until it fires or the session ends (see watchHub).
func (s *subscription) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}
