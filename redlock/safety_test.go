package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redlock"
)

// Schedules that would break a safety promise, against real nodes.

// fault is a go-redis hook that injects faults into one client's link to one
// node: a cut link (every command fails) or one slow script call. It stands
// in for a network fault, not for the server: the commands that pass go to
// the real node.
type fault struct {
	cut      atomic.Bool
	slowNext atomic.Bool  // delay the next EVAL/EVALSHA until its context ends
	slowed   chan error   // receives the slowed call's outcome
	scripts  atomic.Int64 // EVAL/EVALSHA calls seen
}

var errCut = errors.New("test: link cut")

func (f *fault) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if f.cut.Load() {
			return nil, errCut
		}
		return next(ctx, network, addr)
	}
}

func (f *fault) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if f.cut.Load() {
			cmd.SetErr(errCut)
			return errCut
		}
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			f.scripts.Add(1)
			if f.slowNext.CompareAndSwap(true, false) {
				// A request that never gets its answer in time: the
				// caller cannot know whether it ran.
				<-ctx.Done()
				cmd.SetErr(ctx.Err())
				f.slowed <- ctx.Err()
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (f *fault) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if f.cut.Load() {
			for _, c := range cmds {
				c.SetErr(errCut)
			}
			return errCut
		}
		return next(ctx, cmds)
	}
}

// faultyLocker returns a Locker whose link to each node goes through a fault.
func faultyLocker(t *testing.T, srvs []*testserver.Server, opts ...distlock.Option) (distlock.Locker, []*fault) {
	t.Helper()
	cs := clients(t, srvs, true)
	fs := make([]*fault, len(cs))
	for i, c := range cs {
		fs[i] = &fault{slowed: make(chan error, 1)}
		c.AddHook(fs[i])
	}
	l, err := redlock.New(cs, append([]distlock.Option{redlock.WithCloseClients(true)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, fs
}

// contended signals each time an attempt finds the key held.
type contended chan struct{}

func (c contended) Observe(_ context.Context, e distlock.Event) {
	if e.Kind == distlock.EventContended {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// A failed attempt's late, owner-checked release must not match a later
// attempt of the same Acquire. Schedule: the waiter's first attempt finds
// the key held on nodes 1 and 2 while its call to node 0 hangs; the holder
// releases; the second attempt takes nodes 0 and 1 (the waiter is cut off
// from node 2); then the first attempt's call to node 0 times out, and the
// backend releases node 0 for it. With one owner value per Acquire that
// release deleted the second attempt's lock, leaving a lease that reported
// itself held on one node of three while a third client took a majority.
func TestStaleAttemptCannotReleaseLaterAttempt(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key = "stale-attempt"
	nodeTimeout := 500 * time.Millisecond

	holderL := newLocker(t, srvs)
	holder, err := holderL.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	seen := make(contended, 1)
	waiterL, fs := faultyLocker(t, srvs, redlock.WithNodeTimeout(nodeTimeout), distlock.WithObserver(seen))
	fs[0].slowNext.Store(true)

	type result struct {
		ls  *distlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		ls, err := waiterL.Acquire(ctx, key, distlock.WithTTL(time.Minute))
		got <- result{ls, err}
	}()
	select {
	case <-seen: // attempt 1 failed on "held"; its node-0 call still hangs
	case <-ctx.Done():
		t.Fatal("the waiter never found the key held")
	}
	fs[2].cut.Store(true)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	waiter := r.ls
	defer waiter.Release(context.WithoutCancel(ctx))
	select {
	case err := <-fs[0].slowed:
		if err == nil {
			t.Fatal("the slowed call did not fail")
		}
	case <-ctx.Done():
		t.Fatal("attempt 1's call to node 0 never ended")
	}
	// Give attempt 1's background release time to land.
	time.Sleep(nodeTimeout + 500*time.Millisecond)

	third := newLocker(t, srvs)
	intruder, err := third.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err == nil {
		defer intruder.Release(ctx)
		if waiter.Err() == nil {
			t.Fatalf("two holders at once: the waiter's lease (token %d) reports held while a third client got token %d",
				waiter.Token(), intruder.Token())
		}
		t.Fatalf("the waiter's lease was lost (%v) although no node failed", waiter.Err())
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("third client: want ErrNotAcquired, got %v", err)
	}
	if held := lockExists(t, clients(t, srvs, false), "distlock:", key); len(held) < 2 {
		t.Fatalf("the waiter's lock is on nodes %v only", held)
	}
}

// Nodes without persistence restarted one at a time, each down longer than
// the TTL: tokens must still strictly increase (they went from 5 to 1 when
// a restarted node's counter started again at 1).
func TestRollingRestartKeepsTokenOrder(t *testing.T) {
	srvs := testserver.RedisN(t, 3) // no appendonly: a restart forgets everything
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const key, ttl = "rolling", 300 * time.Millisecond
	l := newLocker(t, srvs, redlock.WithNodeTimeout(100*time.Millisecond))
	var last distlock.Token
	grant := func(when string) {
		t.Helper()
		ls, err := l.Acquire(ctx, key, distlock.WithTTL(ttl))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if ls.Token() <= last {
			t.Fatalf("%s: token %d is not above the previous %d", when, ls.Token(), last)
		}
		last = ls.Token()
		_ = ls.Release(ctx)
	}
	for range 5 {
		grant("before the restarts")
	}
	for round := range 2 {
		for i, s := range srvs {
			if err := s.Kill(); err != nil {
				t.Fatal(err)
			}
			grant("with a node down")
			time.Sleep(ttl + 100*time.Millisecond) // down longer than the TTL
			if err := s.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			grant(fmt.Sprintf("after restarting node %d in round %d", i, round))
		}
	}
	// One restarted node plus one that missed the latest grants.
	if err := srvs[2].Kill(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		grant("while node 2 misses grants")
	}
	if err := srvs[2].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srvs[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srvs[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srvs[1].Kill(); err != nil { // the majority is now {0 restarted, 2 lagging}
		t.Fatal(err)
	}
	grant("on a restarted node and a lagging one")
}

// A lease held with auto-renew on exactly a majority keeps it when one node
// of that majority dies: Refresh takes the lock back on the node that lacks
// it. Before, it only extended where the lock was, and the lease died with
// one node of three.
func TestHeldLeaseSurvivesOneNodeOfItsMajority(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const key, ttl = "repair", time.Second
	l, fs := faultyLocker(t, srvs, redlock.WithNodeTimeout(100*time.Millisecond))
	fs[2].cut.Store(true) // acquire on nodes 0 and 1 only
	ls, err := l.Acquire(ctx, key, distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(context.WithoutCancel(ctx))
	admins := clients(t, srvs, false)
	if held := lockExists(t, admins, "distlock:", key); len(held) != 2 || held[0] != 0 || held[1] != 1 {
		t.Fatalf("lock on nodes %v, want [0 1]", held)
	}
	fs[2].cut.Store(false)
	if err := srvs[0].Kill(); err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, srvs, redlock.WithNodeTimeout(100*time.Millisecond))
	var mu sync.Mutex
	var intruders []distlock.Token
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		if err := ls.Err(); err != nil {
			t.Fatalf("the lease died with one node of its majority: %v", err)
		}
		if x, err := other.TryAcquire(ctx, key, distlock.WithTTL(ttl)); err == nil {
			mu.Lock()
			intruders = append(intruders, x.Token())
			mu.Unlock()
			_ = x.Release(ctx)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := ls.Err(); err != nil {
		t.Fatalf("the lease died with one node of its majority: %v", err)
	}
	if len(intruders) > 0 {
		t.Fatalf("another client acquired the held key %d times (tokens %v)", len(intruders), intruders)
	}
}
