package redis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// loseReply is a go-redis hook that lets the next script call run on the
// server and then loses its reply: the caller sees a timeout, as it would
// when a reply is dropped or delayed past its deadline.
type loseReply struct{ armed atomic.Bool }

func (h *loseReply) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *loseReply) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
func (h *loseReply) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		name := cmd.Name()
		if (name != "evalsha" && name != "eval") || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		_ = next(context.WithoutCancel(ctx), cmd)
		cmd.SetErr(context.DeadlineExceeded)
		return context.DeadlineExceeded
	}
}

// An acquire whose reply is lost must not strand the key for its TTL: the
// portable layer gives the attempt back, owner-checked. Before, the next
// client waited out the whole TTL for a key nobody held.
func TestLostAcquireReplyDoesNotStrandKey(t *testing.T) {
	srv := testserver.Redis(t)
	const key, ttl = "lost-reply", 10 * time.Second
	hook := &loseReply{}
	a := hookedLocker(t, srv.Addr(), hook)
	b := newLocker(t, srv.Addr())
	loadScripts(t, b, key)
	for _, call := range []string{"TryAcquire", "Acquire"} {
		hook.armed.Store(true)
		var (
			ls  *distlock.Lease
			err error
		)
		if call == "TryAcquire" {
			ls, err = a.TryAcquire(t.Context(), key, distlock.WithTTL(ttl))
		} else {
			// A waiting Acquire treats the lost reply as a server out of
			// reach and tries again (with a new owner): it may well end
			// up holding the key, which is fine, as long as the lost
			// attempt does not strand it.
			ls, err = a.Acquire(t.Context(), key, distlock.WithTTL(ttl))
		}
		if hook.armed.Load() {
			t.Fatalf("%s: the reply was not lost (err %v)", call, err)
		}
		if call == "TryAcquire" && err == nil {
			t.Fatal("TryAcquire whose reply was lost succeeded")
		}
		if err == nil {
			if err := ls.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		lostAt := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), ttl/2)
		ls, err = b.Acquire(ctx, key, distlock.WithTTL(ttl))
		cancel()
		if err != nil {
			t.Fatalf("%s: the key stayed stranded by the attempt whose reply was lost (TTL %v): %v", call, ttl, err)
		}
		// Generous: the give-back lands within a round trip or two.
		if took := time.Since(lostAt); took > 2*time.Second {
			t.Fatalf("%s: the next client got the key %v after the lost reply (TTL %v)", call, took, ttl)
		}
		if err := ls.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReleaseWithDeadServer(t *testing.T) {
	srv := testserver.Redis(t)
	const rt = time.Second
	l := newLocker(t, srv.Addr(), distlock.WithReleaseTimeout(rt))
	testutil.CheckReleaseWithDeadServer(t, l, "dead", rt, func() {
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
	})
}

// A Release whose reply is lost after the server ran it returns an error,
// and the lease must not go on reporting held while another client holds
// the key: a failed release ends the lease.
func TestFailedReleaseEndsLease(t *testing.T) {
	srv := testserver.Redis(t)
	const key, ttl = "failed-release", 10 * time.Second
	hook := &loseReply{}
	a := hookedLocker(t, srv.Addr(), hook)
	b := newLocker(t, srv.Addr())
	loadScripts(t, b, key)
	la, err := a.TryAcquire(t.Context(), key, distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	relErr := la.Release(t.Context())
	lb, err := b.TryAcquire(t.Context(), key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("B: %v (release: %v)", err, relErr)
	}
	defer lb.Release(context.WithoutCancel(t.Context()))
	if la.Err() == nil && lb.Err() == nil {
		t.Fatalf("two leases report held: A %d (Release: %v; expires in %v) and B %d",
			la.Token(), relErr, time.Until(la.Expires()).Round(time.Millisecond), lb.Token())
	}
}

// hookedLocker returns a Locker whose own client runs hook (a fault on that
// client's link only), closed at the end of the test.
func hookedLocker(t *testing.T, addr string, hook goredis.Hook, opts ...distlock.Option) distlock.Locker {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	c.AddHook(hook)
	l, err := redis.New(c, append([]distlock.Option{redis.WithCloseClient(true)}, opts...)...)
	if err != nil {
		_ = c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// loadScripts takes and releases key once through l, so the server has the
// scripts cached and the next script call is an EVALSHA that runs one.
func loadScripts(t *testing.T, l distlock.Locker, key string) {
	t.Helper()
	ls, err := l.TryAcquire(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
