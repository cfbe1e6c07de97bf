package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// clients returns one client per server, closed at the end of the test
// unless owned is set (then the caller closes them).
func clients(t testing.TB, srvs []*testserver.Server, owned bool) []goredis.UniversalClient {
	t.Helper()
	cs := make([]goredis.UniversalClient, len(srvs))
	for i, s := range srvs {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, DialTimeout: time.Second})
		if !owned {
			t.Cleanup(func() { _ = c.Close() })
		}
		cs[i] = c
	}
	return cs
}

// newLocker returns a Locker with its own clients, closed with the Locker.
func newLocker(t testing.TB, srvs []*testserver.Server, opts ...distlock.Option) distlock.Locker {
	t.Helper()
	cs := clients(t, srvs, true)
	l, err := redlock.New(cs, append([]distlock.Option{redlock.WithCloseClients(true)}, opts...)...)
	if err != nil {
		for _, c := range cs {
			_ = c.Close()
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// lockExists reports which nodes hold key's lock key.
func lockExists(t *testing.T, admins []goredis.UniversalClient, prefix, key string) []int {
	t.Helper()
	var held []int
	for i, a := range admins {
		n, err := a.Exists(context.Background(), redisnode.KeysFor(prefix, key).Lock).Result()
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if n == 1 {
			held = append(held, i)
		}
	}
	return held
}

// The whole suite, on nodes that speak only TLS to a client opened by URL
// with only the documented ACL privileges (see TestSecured).
func TestConformance(t *testing.T) {
	s := newSecuredNodes(t)
	const prefix = securedPrefix + "conf:"
	u, err := url.Parse(s.url(t, "app", "app-pw", true, url.Values{"prefix": {prefix}}))
	if err != nil {
		t.Fatal(err)
	}
	opener, _ := driver.Lookup(u.Scheme)
	conformance.Run(t, conformance.Harness{
		NewBackend: func(ctx context.Context) (driver.Backend, error) { return opener(ctx, u, nil) },
		// A forced expiry deletes the lock on every node.
		ForceExpire: func(ctx context.Context, key string) error {
			var deleted int64
			for _, a := range s.admins {
				n, err := a.Del(ctx, redisnode.KeysFor(prefix, key).Lock).Result()
				if err != nil {
					return err
				}
				deleted += n
			}
			if deleted == 0 {
				return fmt.Errorf("key %q is not held on any node", key)
			}
			return nil
		},
		TTL: 1500 * time.Millisecond,
	})
}

func TestGuarantees(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	g := newLocker(t, srvs).Guarantees()
	if g.FailuresTolerated != 2 || g.TokenSource == "" || g.Backend != "redlock" {
		t.Fatalf("guarantees %+v", g)
	}
}

// With 2 of 5 nodes down (one killed, one stopped) acquires still succeed,
// promptly, with increasing tokens.
func TestTwoOfFiveDown(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	l := newLocker(t, srvs, distlock.WithTTL(2*time.Second))
	ctx := t.Context()
	var last distlock.Token
	acquire := func() {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		began := time.Now()
		ls, err := l.Acquire(actx, "two-down")
		if err != nil {
			t.Fatal(err)
		}
		// Generous liveness bound: the node timeout is 50ms here.
		if d := time.Since(began); d > 2*time.Second {
			t.Errorf("acquire took %v with nodes down", d)
		}
		if ls.Token() <= last {
			t.Fatalf("token %d not above %d", ls.Token(), last)
		}
		last = ls.Token()
		if err := ls.Release(actx); err != nil {
			t.Fatal(err)
		}
	}
	acquire()
	if err := srvs[1].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srvs[3].Pause(); err != nil {
		t.Fatal(err)
	}
	defer srvs[3].Resume()
	for range 5 {
		acquire()
	}
}

// With 3 of 5 nodes down acquires fail fast with ErrNoQuorum, and once the
// nodes are back no lock key is left anywhere.
func TestThreeOfFiveDown(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs, distlock.WithTTL(30*time.Second))
	ctx := t.Context()
	for _, i := range []int{0, 2, 4} {
		if err := srvs[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, blocking := range []bool{false, true} {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		began := time.Now()
		var err error
		if blocking {
			// A waiting Acquire rides out nodes out of reach until its ctx
			// ends, then reports the wait's end and the last failure.
			_, err = l.Acquire(actx, "three-down")
		} else {
			_, err = l.TryAcquire(actx, "three-down")
		}
		cancel()
		if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, distlock.ErrUnavailable) {
			t.Fatalf("blocking=%v: error %v does not match ErrNoQuorum and ErrUnavailable", blocking, err)
		}
		if blocking && (!errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded)) {
			t.Fatalf("blocking: error %v does not say the wait ended with its ctx", err)
		}
		if !blocking && errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("error %v matches ErrNotAcquired: nobody holds the key", err)
		}
		if !strings.Contains(err.Error(), "2 of 5 nodes answered") {
			t.Errorf("error %q does not say how many nodes answered", err)
		}
		if d := time.Since(began); d > 4*time.Second {
			t.Fatalf("blocking=%v: failing took %v", blocking, d)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, i := range []int{0, 2, 4} {
		if err := srvs[i].Restart(rctx); err != nil {
			t.Fatal(err)
		}
	}
	if held := lockExists(t, admins, redis.DefaultPrefix, "three-down"); len(held) > 0 {
		t.Fatalf("lock key left on nodes %v", held)
	}
	// And the set works again.
	ls, err := l.TryAcquire(rctx, "three-down")
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(rctx)
}

// A split vote (nobody has a majority) is a HeldError bounded by the
// holders' TTL, and the loser gives back the nodes it took.
func TestSplitVote(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	admins := clients(t, srvs, false)
	ctx := t.Context()
	k := redisnode.KeysFor(redis.DefaultPrefix, "split")
	for _, i := range []int{0, 1} { // someone else holds 2 nodes
		if err := admins[i].Set(ctx, k.Lock, "other", 5*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srvs[4].Kill(); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, srvs)
	_, err := l.TryAcquire(ctx, "split")
	var held *distlock.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("error %v is not a HeldError", err)
	}
	if held.RetryAfter <= 0 || held.RetryAfter > 5*time.Second {
		t.Fatalf("RetryAfter %v, want the other holder's remaining TTL", held.RetryAfter)
	}
	// The give-backs of nodes that answered are done when TryLock returns;
	// a node slower than the node timeout gives back in the background.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		held := lockExists(t, admins[:4], redis.DefaultPrefix, "split")
		if len(held) == 2 && held[0] == 0 && held[1] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock on nodes %v after the failed attempt, want only the other holder's 0 and 1", held)
		}
	}
}

// A paused node does not hold an acquire up for more than its node timeout.
func TestPausedNodeDoesNotBlock(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	l := newLocker(t, srvs, redlock.WithNodeTimeout(100*time.Millisecond))
	ctx := t.Context()
	if err := srvs[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer srvs[2].Resume()
	for range 3 {
		began := time.Now()
		ls, err := l.TryAcquire(ctx, "paused")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Acquire and refresh do not wait for the paused node; release
		// waits for it up to the node timeout (bound kept generous for a
		// loaded machine; waiting out the node's TCP timeouts would not fit).
		if d := time.Since(began); d > 2*time.Second {
			t.Fatalf("acquire+refresh+release took %v with one node paused", d)
		}
	}
}

// Emulate a clock jump on one node of the holder's majority by deleting the
// lock there; a second client whose majority includes that node must get a
// larger token, although that node's own counter lagged far behind: phase 2
// raised it.
func TestClockJumpTokenOrder(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	admins := clients(t, srvs, false)
	ctx := t.Context()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	first, second := newLocker(t, srvs), newLocker(t, srvs)
	const key = "jump"

	// Node 0 misses five grants, so its counter lags the others'.
	if err := srvs[0].Kill(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		ls, err := first.TryAcquire(rctx, key)
		if err != nil {
			t.Fatal(err)
		}
		_ = ls.Release(rctx)
	}
	if err := srvs[0].Restart(rctx); err != nil {
		t.Fatal(err)
	}
	// The holder's majority is {0, 1, 2}.
	for _, i := range []int{3, 4} {
		if err := srvs[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := first.TryAcquire(rctx, key, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := admins[0].Get(rctx, redisnode.KeysFor(redis.DefaultPrefix, key).Counter).Int64(); distlock.Token(c) != holder.Token() {
		t.Fatalf("node 0's counter is %d after phase 2, want the token %d", c, holder.Token())
	}
	// The jump: node 0 forgets the lock. Nodes 3 and 4 return empty, after
	// the holder's calls to them gave up (a call runs to its node timeout
	// whatever its caller does, and would take a node back up at once).
	if err := admins[0].Del(rctx, redisnode.KeysFor(redis.DefaultPrefix, key).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // > the default node timeout, 200ms
	for _, i := range []int{3, 4} {
		if err := srvs[i].Restart(rctx); err != nil {
			t.Fatal(err)
		}
	}
	// Nodes 1 and 2 still hold the first lease: the second client's
	// majority must be {0, 3, 4}.
	intruder, err := second.TryAcquire(rctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if held := lockExists(t, admins, redis.DefaultPrefix, key); len(held) != 5 {
		t.Fatalf("lock on nodes %v, want all 5 (two leases)", held)
	}
	if intruder.Token() <= holder.Token() {
		t.Fatalf("second lease's token %d is not above the first's %d", intruder.Token(), holder.Token())
	}
	_ = intruder.Release(rctx)
	_ = holder.Release(rctx)
}

// quiet drops go-redis's own log lines (dial failures of the nodes the
// tests kill on purpose).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	goredis.SetLogger(quiet{})
	os.Exit(m.Run())
}

// A waiter on a long-held key is woken by the release notices (here with
// one node down), not by its fallback poll (≥ 5s with a 30s TTL).
func TestHandOffByNotice(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	holder, waiter := newLocker(t, srvs), newLocker(t, srvs)
	ctx := t.Context()
	if err := srvs[0].Kill(); err != nil {
		t.Fatal(err)
	}
	ls, err := holder.TryAcquire(ctx, "handoff", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var token distlock.Token
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := waiter.Acquire(wctx, "handoff", distlock.WithTTL(30*time.Second))
		if err == nil {
			token = w.Token()
			err = w.Release(wctx)
		}
		got <- err
	}()
	time.Sleep(500 * time.Millisecond) // let the waiter subscribe and settle
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(released); d > 3*time.Second {
			t.Fatalf("waiter took %v after the release: woken by its fallback poll, not a notice", d)
		}
		if token <= ls.Token() {
			t.Fatalf("waiter's token %d not above %d", token, ls.Token())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("waiter not woken")
	}
}

// Close ends every goroutine the backend started: node calls, notice pumps,
// pub/sub readers.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	before := runtime.NumGoroutine()
	a, b := newLocker(t, srvs), newLocker(t, srvs)
	ls, err := a.TryAcquire(ctx, "leak", distlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.Acquire(wctx, "leak") // waits (subscribed) until ctx ends
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter: %v", err)
	}
	_ = ls.Release(ctx)
	_ = a.Close()
	_ = b.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after Close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
