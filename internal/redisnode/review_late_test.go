package redisnode_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

// extend.lua says a copy of an older refresh that lands after a newer one
// ran on the node "neither shortens nor lengthens the lock, nor takes it
// back". The newer refresh's number lives in {k}:seq, which expires with
// the lock (and a release deletes it), so once the lock has expired the
// guard is gone: the older copy takes the lock back, for its own (longer)
// TTL. Here refresh 2 shortened the lock to 200 ms; it expired; refresh
// 1's late copy (60 s) then retakes it. Only a tombstone could stop that,
// and there is none after an expiry, and only the lease's TTL after a
// Redlock release (see redlock's TestReviewLateExtendCopyRetakesReleasedLease).
func TestReviewLateOlderExtendRetakesAfterNewerExpired(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("review:", "k")
	r, err := redisnode.AcquireOn(ctx, c, k, "a", 10*time.Second, "")
	if err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	if got, err := redisnode.ExtendOn(ctx, c, k, "a", 200*time.Millisecond, r.Token, "n2", "", 2); err != nil || got != redisnode.ExtendRenewed {
		t.Fatal(got, err)
	}
	time.Sleep(300 * time.Millisecond)                                                // refresh 2's lock, and its sequence key, expire
	got, err := redisnode.ExtendOn(ctx, c, k, "a", time.Minute, r.Token, "n1", "", 1) // refresh 1, late
	if err != nil {
		t.Fatal(err)
	}
	if got != redisnode.ExtendHeldByOther {
		d, _ := c.PTTL(ctx, k.Lock).Result()
		t.Fatalf("a late copy of refresh 1, after refresh 2 ran and expired, answered %v: the lock is back for %v", got, d.Round(time.Second))
	}
}
