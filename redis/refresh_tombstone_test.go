package redis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// A Refresh(WithTTL(shorter)) whose reply is lost may have run on the
// server, so the lease must not count on its old, longer deadline: another
// client could take the key at the short TTL while it reports held.
func TestLostShorterRefreshShortensLease(t *testing.T) {
	srv := testserver.Redis(t)
	const key = "rt-short"
	hook := &loseReply{}
	a := hookedLocker(t, srv.Addr(), hook)
	b := newLocker(t, srv.Addr())
	la, err := a.TryAcquire(t.Context(), key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Refresh(t.Context()); err != nil { // load the refresh script
		t.Fatal(err)
	}
	hook.armed.Store(true)
	rerr := la.Refresh(t.Context(), distlock.WithTTL(300*time.Millisecond))
	t.Logf("refresh: %v; A Err=%v, expires in %v", rerr, la.Err(), time.Until(la.Expires()))
	time.Sleep(500 * time.Millisecond)
	lb, err := b.TryAcquire(t.Context(), key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Logf("B: %v", err)
		return
	}
	defer lb.Release(context.WithoutCancel(t.Context()))
	if la.Err() == nil && lb.Err() == nil {
		t.Fatalf("two leases report held: A %d (expires in %v) and B %d",
			la.Token(), time.Until(la.Expires()).Round(time.Millisecond), lb.Token())
	}
}

// slowNext delays the next script call on the wire: the request is sent,
// detached from its caller, after d (a slow link or a paused server's
// socket buffer); the caller sees its deadline.
type slowNext struct{ d atomic.Int64 }

func (h *slowNext) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *slowNext) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
func (h *slowNext) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		name := cmd.Name()
		d := time.Duration(0)
		if name == "evalsha" || name == "eval" {
			d = time.Duration(h.d.Swap(0))
		}
		if d == 0 {
			return next(ctx, cmd)
		}
		go func() { time.Sleep(d); _ = next(context.Background(), cmd) }()
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}
}

// Tombstones are per owner: the give-back of a second abandoned attempt
// must not overwrite the first one's, or the first attempt's straggling
// acquire takes the lock for nobody for a whole TTL.
func TestTombstonePerOwner(t *testing.T) {
	srv := testserver.Redis(t)
	const key, ttl = "rt-tomb", 10 * time.Second
	rt := distlock.WithReleaseTimeout(150 * time.Millisecond)
	slow := &slowNext{}
	a := hookedLocker(t, srv.Addr(), slow, rt)
	lost := &loseReply{}
	c := hookedLocker(t, srv.Addr(), lost, rt)
	d := newLocker(t, srv.Addr())
	loadScripts(t, d, key)
	// A's attempt reaches the server only after 400 ms; A gives it back
	// (tombstone A) and stops retrying after its release timeout.
	slow.d.Store(int64(400 * time.Millisecond))
	actx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	_, err := a.TryAcquire(actx, key, distlock.WithTTL(ttl))
	cancel()
	t.Logf("A: %v", err)
	time.Sleep(250 * time.Millisecond)
	// C's attempt runs, its reply is lost, C gives it back: tombstone C.
	lost.armed.Store(true)
	_, err = c.TryAcquire(t.Context(), key, distlock.WithTTL(ttl))
	t.Logf("C: %v", err)
	time.Sleep(400 * time.Millisecond) // A's straggler lands meanwhile
	ld, err := d.TryAcquire(t.Context(), key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("key stranded although every attempt on it was given back: %v", err)
	}
	_ = ld.Release(t.Context())
}
