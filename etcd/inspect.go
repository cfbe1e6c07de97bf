package etcd

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// inspectTries bounds the reads of one Inspect that find the first
	// key's lease gone: its revocation deletes the key, so the next read
	// normally finds the next holder (or none).
	inspectTries = 5
	// inspectPause separates those reads.
	inspectPause = 20 * time.Millisecond
	// defaultWatchCreate bounds how long Watch waits for the server to
	// confirm its watch.
	defaultWatchCreate = 5 * time.Second
)

// errLeaseVanished: the holder's lease kept reading as gone while its key
// stayed (a leader that has not applied the revocation yet).
var errLeaseVanished = errors.New("etcd: the holder's lease is gone but its key remains")

// Inspect reads key's queue: one Get of its first key by CreateRevision (the
// holder: its CreateRevision is the token, its value the holder's) that also
// counts the queue, then the remaining TTL of that key's lease. Both reads
// are linearizable. If the lease is gone by the second read, the holder has
// just left and the queue is read again.
func (b *backend) Inspect(ctx context.Context, key string) (_ driver.Holder, err error) {
	defer b.denied(&err)
	q := b.queue(key)
	for try := 1; ; try++ {
		resp, err := b.cli.Get(ctx, q, clientv3.WithFirstCreate()...)
		if err != nil {
			return driver.Holder{}, fmt.Errorf("etcd: reading the queue: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return driver.Holder{}, nil
		}
		kv := resp.Kvs[0]
		h := driver.Holder{
			Held:    true,
			Token:   kv.CreateRevision,
			Value:   string(kv.Value),
			Waiters: int(resp.Count - 1),
		}
		if kv.Lease == 0 {
			return h, nil // put by hand without a lease: held until deleted, no TTL
		}
		if b.beforeTTL != nil {
			b.beforeTTL()
		}
		ttl, err := b.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		switch {
		case err != nil && !leaseGone(err):
			return driver.Holder{}, fmt.Errorf("etcd: reading the holder's lease: %w", err)
		case err == nil && ttl.TTL >= 0:
			// Whole seconds, rounded down: under a second left reads 0,
			// which would mean "no TTL".
			h.TTL = max(time.Duration(ttl.TTL)*time.Second, time.Nanosecond)
			return h, nil
		case try == inspectTries:
			return driver.Holder{}, errLeaseVanished
		}
		if err := clock.Sleep(ctx, inspectPause); err != nil {
			return driver.Holder{}, err
		}
	}
}

// Watch watches key's queue, from the revision the server is at when it
// makes the watch: Watch returns once the server has confirmed it, so every
// change after Watch returns is heard.
func (b *backend) Watch(ctx context.Context, key string) (_ driver.Subscription, err error) {
	defer b.denied(&err)
	// WithRequireLeader: a member cut off from the leader ends the watch
	// (an error from Wait) instead of leaving it silent.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stop := context.AfterFunc(b.life, cancel) // the backend's Close ends it too
	s := &subscription{key: key, cancel: cancel, stop: stop}
	// The client's Watch returns once the server has made the watch, or
	// once wctx ends: the timer bounds that wait.
	timer := time.AfterFunc(b.watchCreate, cancel)
	s.wch = b.cli.Watch(wctx, b.queue(key), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	wr, ok := <-s.wch // the creation's confirmation, or why there is none
	timedOut := !timer.Stop()
	err = s.broken(wr, ok)
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case b.life.Err() != nil:
		err = fmt.Errorf("%w: etcd: watching %q", distlock.ErrClosed, key)
	case timedOut:
		err = fmt.Errorf("etcd: watch of %q: not confirmed within %v", key, b.watchCreate)
	case err == nil && wr.Created:
		return s, nil
	case err == nil:
		err = fmt.Errorf("etcd: watch of %q: its first response is not its creation", key)
	}
	_ = s.Close()
	return nil, err
}

// subscription is one Watch: an etcd watch on a key's queue.
type subscription struct {
	key    string
	wch    clientv3.WatchChan
	cancel context.CancelFunc
	stop   func() bool
	err    error // the watch broke after a notice Wait returned: the next Wait reports it

	once sync.Once
}

// Wait returns once a change that may concern the holder arrived (a key of
// the queue created or deleted), after taking in every response already
// at hand, so a burst gives one notice; it fails when the watch breaks
// (compaction, no leader, closed), and the portable layer then polls.
func (s *subscription) Wait(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-s.wch:
			if err := s.broken(wr, ok); err != nil {
				s.err = err
				return err
			}
			if !notice(wr) {
				continue
			}
			s.drain()
			return nil
		}
	}
}

// drainYields is how many times in a row drain lets other goroutines run
// while no response is ready before it stops.
const drainYields = 3

// drain takes in the responses the client already has, so that they add
// no notice. The client's goroutine hands them over one at a time: when
// none is ready, drain yields to let it run, a few times, before it stops.
func (s *subscription) drain() {
	for idle := 0; idle < drainYields; {
		select {
		case wr, ok := <-s.wch:
			if err := s.broken(wr, ok); err != nil {
				s.err = err // reported by the next Wait
				return
			}
			idle = 0
		default:
			runtime.Gosched()
			idle++
		}
	}
}

// broken tells whether a response (ok false: the channel closed) ends the
// watch, and why.
func (s *subscription) broken(wr clientv3.WatchResponse, ok bool) error {
	switch {
	case !ok:
		return fmt.Errorf("etcd: watch of %q ended", s.key)
	case wr.Err() != nil:
		return fmt.Errorf("etcd: watch of %q: %w", s.key, wr.Err())
	case wr.Canceled:
		return fmt.Errorf("etcd: watch of %q cancelled by the server", s.key)
	}
	return nil
}

// notice: the response has an event that may change the holder. A key
// created (Version 1) may be the new holder of a free key, a deleted one
// may have been the holder; a put on an existing key (a Refresh moving it
// to a lease of another TTL) changes neither holder nor token.
func notice(wr clientv3.WatchResponse) bool {
	for _, ev := range wr.Events {
		if ev.Type == mvccpb.DELETE || ev.Kv.Version == 1 {
			return true
		}
	}
	return false
}

// Close cancels the etcd watch; the client then closes its server-side
// watch, and its stream and goroutines if no other watch shares them.
func (s *subscription) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.stop()
	})
	return nil
}
