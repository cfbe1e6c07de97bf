package redisnode_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

// recordTTL is the holder record's PTTL; -2 when it does not exist.
func recordTTL(t *testing.T, c *goredis.Client, k redisnode.Keys) time.Duration {
	t.Helper()
	d, err := c.PTTL(t.Context(), k.Holder).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The single-Redis scripts: the acquire writes the holder record only with
// a value, the refresh extends it only when told, the release deletes it,
// and InspectOn reports a record only while its owner holds the lock.
func TestHolderRecordSingle(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("rec:", "k")

	if nl, err := redisnode.InspectOn(ctx, c, k); err != nil || nl != (redisnode.NodeLock{}) {
		t.Fatalf("InspectOn of a free key = %+v, %v", nl, err)
	}
	r, err := redisnode.AcquireOn(ctx, c, k, "a", time.Second, "value of a")
	if err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	nl, err := redisnode.InspectOn(ctx, c, k)
	if err != nil || !nl.Held || nl.Owner != "a" || !nl.Recorded || nl.Token != r.Token || nl.Value != "value of a" ||
		!nl.CounterOK || nl.Counter != r.Token || nl.TTL <= 0 || nl.TTL > time.Second {
		t.Fatalf("InspectOn after an acquire with a value = %+v, %v; want owner a, token %d recorded", nl, err, r.Token)
	}
	if d := recordTTL(t, c, k); d <= 0 || d > time.Second {
		t.Fatalf("record PTTL %v after an acquire for 1s", d)
	}
	// A resent acquire of the same attempt changes nothing: the counter is
	// still the holder's token (what single-Redis Inspect reports).
	if again, err := redisnode.AcquireOn(ctx, c, k, "a", time.Second, "value of a"); err != nil || again.Token != r.Token {
		t.Fatalf("resent acquire = %+v, %v", again, err)
	}
	if nl, err := redisnode.InspectOn(ctx, c, k); err != nil || !nl.CounterOK || nl.Counter != r.Token || nl.Token != r.Token {
		t.Fatalf("InspectOn after a resent acquire = %+v, %v; want counter and record at token %d", nl, err, r.Token)
	}
	// A refresh with the record extends both; one without leaves the record.
	if ok, err := redisnode.RefreshOn(ctx, c, k, "a", time.Minute, true, 0); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if d := recordTTL(t, c, k); d < 30*time.Second {
		t.Fatalf("record PTTL %v after a refresh to 1m with the record", d)
	}
	if ok, err := redisnode.RefreshOn(ctx, c, k, "a", 2*time.Minute, false, 0); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if d := recordTTL(t, c, k); d > time.Minute {
		t.Fatalf("record PTTL %v: a refresh without the record extended it", d)
	}
	if ok, err := redisnode.ReleaseOn(ctx, c, k, "a", 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if d := recordTTL(t, c, k); d != -2 {
		t.Fatalf("record PTTL %v after the release, want it deleted", d)
	}

	// A record left by a holder whose lock ended without a release (here
	// deleted, as by an early expiry) is not the next holder's.
	if r, err := redisnode.AcquireOn(ctx, c, k, "b", time.Minute, "value of b"); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	if err := c.Del(ctx, k.Lock).Err(); err != nil {
		t.Fatal(err)
	}
	r, err = redisnode.AcquireOn(ctx, c, k, "c", time.Minute, "")
	if err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	if v := c.HGet(ctx, k.Holder, "value").Val(); v != "value of b" {
		t.Fatalf("the stale record is %q; the test needs it there", v)
	}
	nl, err = redisnode.InspectOn(ctx, c, k)
	if err != nil || !nl.Held || nl.Owner != "c" || nl.Recorded || nl.Value != "" || nl.Counter != r.Token {
		t.Fatalf("InspectOn with an earlier holder's record left = %+v, %v; want owner c, token %d, no record", nl, err, r.Token)
	}
}

// Redlock's scripts: phase 2 records the lease's token (not the node's
// counter), a refresh extends the record or writes it where it is missing
// or another owner's, and a lock taken back gets its record back.
func TestHolderRecordRedlock(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("rec:", "r")

	r, err := redisnode.AcquireOn(ctx, c, k, "a", time.Second, "")
	if err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	if n := c.Exists(ctx, k.Holder).Val(); n != 0 {
		t.Fatal("an acquire without a value wrote a holder record")
	}
	lease := r.Token + 10 // the quorum's maximum, above this node's counter
	if ok, err := redisnode.RaiseTokenOn(ctx, c, k, "a", lease, time.Second, "v"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	check := func(why string, wantTTL time.Duration) {
		t.Helper()
		nl, err := redisnode.InspectOn(ctx, c, k)
		if err != nil || !nl.Held || nl.Owner != "a" || !nl.Recorded || nl.Token != lease || nl.Value != "v" {
			t.Fatalf("%s: InspectOn = %+v, %v; want owner a with token %d and value v recorded", why, nl, err, lease)
		}
		if d := recordTTL(t, c, k); d < wantTTL/2 || d > wantTTL {
			t.Fatalf("%s: record PTTL %v, want about %v", why, d, wantTTL)
		}
	}
	check("after phase 2", time.Second)
	if got, err := redisnode.ExtendOn(ctx, c, k, "a", time.Minute, lease, "n1", "v", 0); err != nil || got != redisnode.ExtendRenewed {
		t.Fatal(got, err)
	}
	check("after a refresh", time.Minute)
	// The record lost (phase 2 never reached this node) or an earlier
	// holder's: the next refresh writes it.
	if err := c.Del(ctx, k.Holder).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := redisnode.ExtendOn(ctx, c, k, "a", time.Minute, lease, "n2", "v", 0); err != nil || got != redisnode.ExtendRenewed {
		t.Fatal(got, err)
	}
	check("after a refresh of a node without the record", time.Minute)
	if err := c.HSet(ctx, k.Holder, "owner", "old", "token", "1", "value", "old").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := redisnode.ExtendOn(ctx, c, k, "a", time.Minute, lease, "n3", "v", 0); err != nil || got != redisnode.ExtendRenewed {
		t.Fatal(got, err)
	}
	check("after a refresh of a node with an earlier holder's record", time.Minute)
	// The node loses everything (a restart without persistence) and its
	// counter restarts from the clock, above the lease's token; the refresh
	// takes the lock back with its record.
	time.Sleep(time.Millisecond) // the clock in µs passes the lease's token
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := redisnode.AcquireOn(ctx, c, k, "other", time.Minute, ""); err != nil || !r.Acquired || r.Token <= lease {
		t.Fatalf("a minority acquire after the restart = %+v, %v; want a token above %d", r, err, lease)
	}
	if ok, err := redisnode.ReleaseOn(ctx, c, k, "other", 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got, err := redisnode.ExtendOn(ctx, c, k, "a", time.Minute, lease, "n4", "v", 0); err != nil || got != redisnode.ExtendRetaken {
		t.Fatal(got, err)
	}
	check("after the lock was taken back", time.Minute)
	if nl, _ := redisnode.InspectOn(ctx, c, k); nl.Counter <= lease {
		t.Fatalf("counter %d: the test wants it above the lease's token %d", nl.Counter, lease)
	}
	if ok, err := redisnode.ReleaseOn(ctx, c, k, "a", time.Second, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if n := c.Exists(ctx, k.Holder).Val(); n != 0 {
		t.Fatal("the release left the holder record")
	}
	// Phase 2 of an attempt that no longer holds the lock writes nothing.
	if ok, err := redisnode.RaiseTokenOn(ctx, c, k, "a", lease, time.Second, "v"); err != nil || ok {
		t.Fatal(ok, err)
	}
	if n := c.Exists(ctx, k.Holder).Val(); n != 0 {
		t.Fatal("a refused phase 2 wrote a holder record")
	}
}

// InspectQueueOn counts the fair queue's live places, held or free, in the
// same reply as the lock; lapsed places and the holder are not counted.
func TestInspectQueue(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("q:", "k")
	const window = 100 * time.Millisecond
	inspect := func(what string, held bool, waiters int) redisnode.NodeLock {
		t.Helper()
		nl, err := redisnode.InspectQueueOn(ctx, c, k)
		if err != nil || nl.Held != held || nl.Waiters != waiters {
			t.Fatalf("%s: InspectQueueOn = %+v, %v; want held %v, %d waiters", what, nl, err, held, waiters)
		}
		return nl
	}
	inspect("never taken", false, 0)
	a, err := redisnode.AcquireFairOn(ctx, c, k, "a", time.Minute, "", "wa", window)
	if err != nil || !a.Acquired {
		t.Fatal(a, err)
	}
	inspect("held, nobody waiting (the holder is not a waiter)", true, 0)
	for _, w := range []string{"wb", "wc"} {
		if r, err := redisnode.AcquireFairOn(ctx, c, k, "o"+w, time.Minute, "", w, window); err != nil || r.Acquired {
			t.Fatal(r, err)
		}
	}
	nl := inspect("held, two waiting", true, 2)
	if nl.Owner != "a" || nl.Recorded || !nl.CounterOK || nl.Counter != a.Token {
		t.Fatalf("held without a value: %+v; want owner a, no record, counter %d", nl, a.Token)
	}
	if ok, err := redisnode.DequeueOn(ctx, c, k, "wc"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	inspect("one waiter left the queue", true, 1)
	if ok, err := redisnode.ReleaseFairOn(ctx, c, k, "a", time.Second, false, window); err != nil || !ok {
		t.Fatal(ok, err)
	}
	inspect("free, its first waiter's window open", false, 1)
	// The first waiter never comes: its place lapses after the window.
	time.Sleep(2 * window)
	inspect("free, the waiter's place lapsed", false, 0)
	// A holder with a value: the record comes with the count.
	v, err := redisnode.AcquireOn(ctx, c, k, "d", time.Minute, "value of d")
	if err != nil || !v.Acquired {
		t.Fatal(v, err)
	}
	if r, err := redisnode.AcquireFairOn(ctx, c, k, "oe", time.Minute, "", "we", window); err != nil || r.Acquired {
		t.Fatal(r, err)
	}
	if nl := inspect("held with a value, one waiting", true, 1); !nl.Recorded || nl.Value != "value of d" || nl.Token != v.Token {
		t.Fatalf("held with a value: %+v; want the record of token %d", nl, v.Token)
	}
}
