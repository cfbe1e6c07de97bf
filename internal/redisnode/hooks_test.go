package redisnode_test

// Scripts sent with words built by us (Do) must survive hooks that rewrite
// a command's words in place, resends after NOSCRIPT, and Rings (each
// fails if words are resent or shared).

import (
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

func hookedClient(t *testing.T, addr, prefix string) *goredis.Client {
	c := newClient(t, addr)
	c.AddHook(testutil.KeyPrefixHook{Prefix: prefix})
	return c
}

// The EVAL sent after NOSCRIPT must have new words: resending the ones the
// hook already rewrote ran it on "t:t:<lock>", so a second owner's EVALSHA
// (script now cached) found "t:<lock>" free. Two holders.
func TestHookAcquireNoscript(t *testing.T) {
	srv := testserver.Redis(t)
	c := hookedClient(t, srv.Addr(), "t:")
	admin := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("h:", "k")
	admin.ScriptFlush(ctx) // a fresh server, a restart, a failover
	a, err := redisnode.AcquireOn(ctx, c, k, "A", time.Minute, "")
	if err != nil || !a.Acquired {
		t.Fatal(a, err)
	}
	b, err := redisnode.AcquireOn(ctx, c, k, "B", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.Acquired {
		t.Errorf("A (token %d) and B (token %d) both acquired %q; lock keys on server: %q",
			a.Token, b.Token, k.Lock, admin.Keys(ctx, "*h:{k}").Val())
	}
}

// A batch's resend after NOSCRIPT (RefreshManyOn / ExtendManyOn) must not
// send the hook-rewritten words again: rewritten twice, our own lock was
// reported lost.
func TestHookRefreshManyNoscript(t *testing.T) {
	srv := testserver.Redis(t)
	c := hookedClient(t, srv.Addr(), "t:")
	admin := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("h:", "r")
	redisnode.AcquireOn(ctx, admin, redisnode.KeysFor("w:", "w"), "w", time.Second, "") // acquire script cached: no fallback
	if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, ""); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	admin.ScriptFlush(ctx)
	ok, errs := redisnode.RefreshManyOn(ctx, c, []redisnode.Refresh{{Keys: k, Owner: "me", TTL: time.Minute}})
	if errs[0] != nil || !ok[0] {
		t.Errorf("RefreshManyOn of our held lock after SCRIPT FLUSH = %v, %v; want true (keys now: %q)",
			ok[0], errs[0], admin.Keys(ctx, "*h:{r}*").Val())
	}
}

// redlock/batch.go sends one ExtendBatch to every node at once. Each node
// must get words of its own: with shared slices a rewriting hook on each
// node's client wrote them from several goroutines (a race) and nodes saw
// keys prefixed 1, 2, 3 times: extend ran on keys that did not exist
// ("retaken"), while the real lock was not extended.
func TestSharedBatchHook(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	k := redisnode.KeysFor("h:", "b")
	cs := make([]*goredis.Client, len(srvs))
	for i, s := range srvs {
		cs[i] = hookedClient(t, s.Addr(), "t:")
		if r, err := redisnode.AcquireOn(ctx, cs[i], k, "me", time.Minute, ""); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		// warm the extend script so no node meets NOSCRIPT
		redisnode.ExtendOn(ctx, cs[i], redisnode.KeysFor("w:", "w"), "w", time.Second, 1, "w", "", 0)
	}
	batch := redisnode.NewExtendBatch([]redisnode.Extend{{Keys: k, Owner: "me", TTL: time.Minute, Token: 1, Nonce: "n1"}})
	res := make([][]redisnode.Extended, len(cs))
	errs := make([][]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { res[i], errs[i] = batch.On(ctx, c) })
	}
	wg.Wait()
	for i := range cs {
		if errs[i][0] != nil || res[i][0] != redisnode.ExtendRenewed {
			t.Errorf("node %d: extend of our held lock = %v, %v; want ExtendRenewed (keys: %q)", i, res[i][0], errs[i][0],
				newClient(t, srvs[i].Addr()).Keys(ctx, "*h:{b}").Val())
		}
	}
}

// On a Ring, SCRIPT LOAD (keyless) goes to one random shard: after a flush
// or restart of both shards, a resend as EVALSHA met NOSCRIPT again on the
// other and its locks' renewals failed. The resend is EVAL, routed by its
// keys. (A Redlock node may be a Ring.)
func TestRingNoscriptReload(t *testing.T) {
	ring, direct, keys := ringOfTwo(t)
	ctx := t.Context()
	for s := range direct {
		if r, err := redisnode.AcquireOn(ctx, ring, keys[s], "me", time.Minute, ""); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
	}
	fails := 0
	for round := range 8 { // Load picks a shard at random
		for s := range direct {
			direct[s].ScriptFlush(ctx)
		}
		res, errs := redisnode.ExtendManyOn(ctx, ring, []redisnode.Extend{
			{Keys: keys[0], Owner: "me", TTL: time.Minute, Token: 1, Nonce: fmt.Sprint("a", round)},
			{Keys: keys[1], Owner: "me", TTL: time.Minute, Token: 1, Nonce: fmt.Sprint("b", round)},
		})
		for s := range errs {
			if errs[s] != nil {
				fails++
				t.Logf("round %d: lock on shard %d: %v, %v", round, s, res[s], errs[s])
			}
		}
	}
	if fails > 0 {
		t.Errorf("%d of 16 extends of held locks failed after a SCRIPT FLUSH of the ring's shards", fails)
	}
}

// Decoding and routing cases that must keep holding.
func TestHeld(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	for _, proto := range []int{2, 3} {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: proto})
		t.Cleanup(func() { _ = c.Close() })
		admin := newClient(t, srv.Addr())
		// token above 2^53, exact
		k := redisnode.KeysFor(fmt.Sprint("p", proto, ":"), "{odd}%key}")
		big := int64(1<<62 + 12345)
		admin.Set(ctx, k.Counter, big, 0)
		admin.ScriptFlush(ctx)
		r, err := redisnode.AcquireOn(ctx, c, k, "", time.Minute, "v")
		if err != nil || !r.Acquired || int64(r.Token) != big+1 {
			t.Fatalf("resp%d: big counter: %+v, %v", proto, r, err)
		}
		// resent attempt (same, empty owner) gets the counter
		r2, err := redisnode.AcquireOn(ctx, c, k, "", time.Minute, "v")
		if err != nil || !r2.Acquired || r2.Token != r.Token {
			t.Fatalf("resp%d: resent: %+v, %v", proto, r2, err)
		}
		// held, PTTL -1 (no expiry) is reported as held, not acquired
		admin.Persist(ctx, k.Lock)
		h, err := redisnode.AcquireOn(ctx, c, k, "x", time.Minute, "")
		if err != nil || h.Acquired || h.HolderTTL != -time.Millisecond {
			t.Fatalf("resp%d: held/no-ttl: %+v, %v", proto, h, err)
		}
		// release only ours; tombstone refuses the late attempt
		if ok, err := redisnode.ReleaseOn(ctx, c, k, "x", 0, true); err != nil || ok {
			t.Fatalf("resp%d: release by other: %v %v", proto, ok, err)
		}
		admin.ScriptFlush(ctx)
		if ok, err := redisnode.ReleaseOn(ctx, c, k, "", time.Minute, true); err != nil || !ok {
			t.Fatalf("resp%d: release: %v %v", proto, ok, err)
		}
		if g, err := redisnode.AcquireOn(ctx, c, k, "", time.Minute, ""); err != nil || g.Acquired {
			t.Fatalf("resp%d: tombstoned: %+v %v", proto, g, err)
		}
		// resent attempt with the counter missing: an error, not a token 0
		k2 := redisnode.KeysFor(fmt.Sprint("q", proto, ":"), "k")
		admin.Set(ctx, k2.Lock, "o", time.Minute)
		if g, err := redisnode.AcquireOn(ctx, c, k2, "o", time.Minute, ""); err == nil {
			t.Fatalf("resp%d: missing counter: %+v", proto, g)
		} else {
			t.Logf("resp%d missing counter: %v", proto, err)
		}
		_ = distlock.Token(0)
	}
}
