package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redlock"
)

// Found by the audit of the repairing Refresh: a node out of reach must not
// count as still holding the lock once its lock there has expired. Schedule
// (3 nodes, TTL 1 s): A holds all three with auto-renew; A's link to node 2
// is cut and its lock there expires; A's lock vanishes from node 1 (DEL, a
// clock jump); B takes nodes 1 and 2 and releases. A majority was free, so
// A's next refresh must not take node 1 back and carry on: A is lost.
func TestNoRepairAfterUnreachableNodeExpired(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit-repair", time.Second
	nt := redlock.WithNodeTimeout(100 * time.Millisecond)
	aL, fs := faultyLocker(t, srvs, nt)
	a, err := aL.Acquire(ctx, key, distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(context.WithoutCancel(ctx))
	admins := clients(t, srvs, false)
	time.Sleep(ttl / 2) // a refresh confirms all three nodes
	if held := lockExists(t, admins, "distlock:", key); len(held) != 3 {
		t.Fatalf("A's lock on nodes %v, want all three", held)
	}
	fs[2].cut.Store(true)
	time.Sleep(ttl + 300*time.Millisecond) // A's lock on node 2 expires
	if a.Err() != nil {
		t.Fatalf("A lost its lease while two nodes of three answered: %v", a.Err())
	}
	if held := lockExists(t, admins, "distlock:", key); len(held) != 2 || held[0] != 0 || held[1] != 1 {
		t.Fatalf("A's lock on nodes %v, want [0 1]", held)
	}

	bL := newLocker(t, srvs, nt)
	lockKey := redisnode.KeysFor("distlock:", key).Lock
	var b *distlock.Lease
	for try := 0; b == nil; try++ {
		if try == 50 {
			t.Fatal("B never got nodes 1 and 2")
		}
		admins[1].Del(ctx, lockKey) // a clock jump on node 1 frees A's lock there
		b, err = bL.TryAcquire(ctx, key, distlock.WithTTL(ttl))
		if err != nil {
			b = nil
			time.Sleep(20 * time.Millisecond)
		}
	}
	aTok, bTok := a.Token(), b.Token()
	if a.Err() == nil {
		t.Logf("A (token %d) and B (token %d) both report held now (the clock-jump overlap Redlock admits)", aTok, bTok)
	}
	time.Sleep(100 * time.Millisecond)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // several of A's refreshes
	if err := a.Err(); err == nil {
		t.Fatalf("A still reports held (token %d, Err nil) after B held the key with token %d and released it: "+
			"Refresh took node 1 back while counting unreachable node 2, whose lock had expired, as unbroken; "+
			"lock now on nodes %v", aTok, bTok, lockExists(t, admins, "distlock:", key))
	}
}

// One paused node (SIGSTOP: requests accepted, never answered) of three
// must not end a renewing lease, even with a node timeout of TTL/3: Refresh
// decides at quorum and leaves the slow node to the node timeout.
func TestPausedNodeDoesNotEndRenewingLease(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit-paused", 1500 * time.Millisecond
	l := newLocker(t, srvs, redlock.WithNodeTimeout(ttl/3))
	ls, err := l.Acquire(ctx, key, distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(context.WithoutCancel(ctx))
	if err := srvs[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer srvs[2].Resume()
	select {
	case <-ls.Done():
		t.Fatalf("one paused node of three ended a renewing lease (node timeout TTL/3): %v", ls.Err())
	case <-time.After(4 * ttl):
	}
}

// A node restarted from an older snapshot comes back with a stale (not
// missing) counter; with a node that missed the latest grants, the next
// majority is {stale, lagging}. Its token must still be larger: the acquire
// script takes max(counter+1, the server clock in µs) on every node.
func TestTokensAfterSnapshotRestart(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit-snapshot", 300 * time.Millisecond
	l, fs := faultyLocker(t, srvs, redlock.WithNodeTimeout(100*time.Millisecond))
	admins := clients(t, srvs, false)
	var last distlock.Token
	grant := func(when string) {
		t.Helper()
		ls, err := l.Acquire(ctx, key, distlock.WithTTL(ttl))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		defer ls.Release(ctx)
		if ls.Token() <= last {
			t.Fatalf("%s: token %d is not above the previous %d (by %d)", when, ls.Token(), last, last-ls.Token())
		}
		last = ls.Token()
	}
	for i := range 3 {
		grant(fmt.Sprintf("grant %d on all nodes", i))
	}
	if err := admins[0].Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	fs[2].cut.Store(true)
	for i := range 5 {
		grant(fmt.Sprintf("grant %d while node 2 misses grants", i))
	}
	if err := srvs[0].Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 100*time.Millisecond) // down longer than the TTL
	if err := srvs[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	fs[1].cut.Store(true)
	fs[2].cut.Store(false)
	grant("on node 0 (restarted from its snapshot) and node 2 (missed grants)")
}
