package redlock_test

// Adversarial review of the late-request change on the nodes of a Redlock
// set (see redis's review_late_test.go).

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redlock"
)

// A lease taken for 1 s tries to lengthen itself to 30 s; the extend's
// copies to two of three nodes are held up in the network (2.5 s, within
// the give-back margin of 5 s), so the refresh fails for want of a quorum
// and the lease carries on at 1 s. The holder then releases: every node
// frees the lock and keeps the owner's tombstone for the lease's TTL (1 s)
// only, not TTL + margin as a give-back's, and the release deletes the
// refresh-sequence key too. The held copies land after the tombstones
// expired: extend.lua finds the lock missing, no tombstone, no sequence,
// and takes it back, on a majority, for 30 s. A released lease holds the
// key: B cannot take it, and Inspect shows A's token.
// (DESIGN: "a request that lands late can never ... re-take or release what
// a later request of the same lease decided"; the redis backend's tombstone
// is now TTL + margin on every release, Redlock's lease release stays TTL.)
func TestReviewLateExtendCopyRetakesReleasedLease(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	const delay = 2500 * time.Millisecond
	var cs []goredis.UniversalClient
	var pxs []*testutil.DelayProxy
	for i, s := range srvs {
		addr := s.Addr()
		if i < 2 {
			px := testutil.NewDelayProxy(t, addr, delay)
			pxs = append(pxs, px)
			addr = px.Addr()
		}
		cs = append(cs, goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second}))
	}
	a, err := redlock.New(cs, redlock.WithCloseClients(true), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srvs)
	loadScripts(t, srvs)
	const key = "review-late-extend-after-release"
	ctx := t.Context()
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, px := range pxs {
		px.HoldNext(1, []byte("\r\n30000\r\n")) // the 30 s extend's copies to nodes 0 and 1
	}
	err = la.Refresh(ctx, distlock.WithTTL(30*time.Second))
	t.Logf("30 s refresh, held up on two nodes: %v", err)
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	time.Sleep(delay + 500*time.Millisecond) // the held copies landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, key)
	if err == nil {
		_ = lb.Release(context.WithoutCancel(ctx))
		return
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	t.Fatalf("A released (token %d), yet its late extend copies took the key back: Inspect held=%v token=%d ttl=%v; B: %v",
		la.Token(), h.Held, h.Token, h.TTL.Round(time.Second), err)
}

// The Redlock form of a held-out attempt: node clients whose read timeout
// (200 ms) is shorter than the node timeout, so go-redis resends a phase-1
// acquire on a new connection while its first copy is held up. B holds the
// key; every resend says "held", so A's attempt fails with ErrNotAcquired
// and nothing is given back (give-backs go only to nodes that said yes or
// failed). B releases; A's first copies land on the free nodes and take all
// three for an attempt nobody holds, for its whole TTL (30 s).
func TestReviewLatePhaseOneCopyOfHeldOutAttemptStrandsKey(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	const delay = 1500 * time.Millisecond
	var cs []goredis.UniversalClient
	var pxs []*testutil.DelayProxy
	for _, s := range srvs {
		px := testutil.NewDelayProxy(t, s.Addr(), delay)
		pxs = append(pxs, px)
		cs = append(cs, goredis.NewClient(&goredis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true,
			DialTimeout: time.Second, ReadTimeout: 200 * time.Millisecond}))
	}
	a, err := redlock.New(cs, redlock.WithCloseClients(true), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srvs)
	loadScripts(t, srvs)
	const key = "review-late-phase1-held-out"
	ctx := t.Context()
	lb, err := b.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, px := range pxs {
		px.HoldNext(1, []byte(key+"}")) // A's phase-1 first copies
	}
	_, err = a.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("A's attempt (answered by the resent copies, B holding): %v, want ErrNotAcquired", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(delay + 300*time.Millisecond) // the late first copies landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("key stranded by the late phase-1 copies of A's failed attempt (Inspect: held=%v ttl=%v): %v",
			h.Held, h.TTL.Round(time.Second), err)
	}
	_ = lc.Release(context.WithoutCancel(ctx))
}
