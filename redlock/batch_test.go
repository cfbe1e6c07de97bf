package redlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// Renewing leases due together are refreshed with one pipeline per node,
// each judged as a single refresh would be: they stay held through a node
// that stops answering (a minority), and one whose lock lapsed on a
// majority is reported lost while the others stay held.
func TestRenewalBatches(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	cs := clients(t, srvs, true)
	counters := make([]*testutil.RedisCalls, len(cs))
	for i, c := range cs {
		counters[i] = &testutil.RedisCalls{}
		c.(*goredis.Client).AddHook(counters[i])
	}
	l, err := redlock.New(cs, redlock.WithCloseClients(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	admins := clients(t, srvs, false)
	const n = 200
	base, _ := testutil.Goroutines("github.com/distlock/distlock")
	leases := make([]*distlock.Lease, n)
	for i := range leases {
		ls, err := l.TryAcquire(ctx, fmt.Sprint("batch-", i), distlock.WithTTL(900*time.Millisecond), distlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = ls
	}
	if g, dump := testutil.Goroutines("github.com/distlock/distlock"); g > base+len(srvs)*3 {
		t.Errorf("%d library goroutines for %d renewing leases, %d before:\n%s", g, n, base, dump)
	}
	singles, pipes := counters[0].Singles.Load(), counters[0].Pipelines.Load()
	time.Sleep(1500 * time.Millisecond) // about five intervals
	singles, pipes = counters[0].Singles.Load()-singles, counters[0].Pipelines.Load()-pipes
	t.Logf("node 0: %d pipelines, %d single calls for %d leases over ~5 intervals", pipes, singles, n)
	if singles+pipes > n {
		t.Errorf("node 0 saw %d round trips for %d leases over ~5 intervals: not batched", singles+pipes, n)
	}

	// Node 2 stops answering: the majority {0,1} keeps every lease.
	if err := srvs[2].Pause(); err != nil {
		t.Fatal(err)
	}
	// Lease 0's lock vanishes on nodes 0 and 1 (as by a clock jump).
	lock0 := redisnode.KeysFor(redis.DefaultPrefix, "batch-0").Lock
	for _, a := range admins[:2] {
		if err := a.Del(ctx, lock0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if err := srvs[2].Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leases[0].Done():
	case <-time.After(5 * time.Second):
		t.Error("lease 0 lapsed on a majority but was not reported lost")
	}
	for i, ls := range leases[1:] {
		if err := ls.Err(); err != nil {
			t.Fatalf("lease %d lost with a majority up: %v", i+1, err)
		}
	}
	for _, ls := range leases[1:] {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A batch is judged once a quorum answered, as a single refresh is: a paused
// minority node must not hold every renewal up to the node timeout (leases
// with little validity left would be lost waiting).
func TestRenewalBatchDoesNotWaitForAPausedNode(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	const nodeTimeout = 3 * time.Second
	b, err := redlock.NewBackend(clients(t, srvs, false), redlock.WithNodeTimeout(nodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	br := b
	const ttl = 10 * time.Second
	drift := driver.Drift{Factor: distlock.DefaultDriftFactor, Min: distlock.DefaultDriftMin}
	var batch []driver.Refresh
	for i := range 4 {
		req := driver.Request{Key: fmt.Sprint("paused-", i), TTL: ttl, Owner: fmt.Sprint("owner-", i), Drift: drift}
		g, err := b.TryLock(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		g.Key, g.Owner, g.TTL, g.Drift = req.Key, req.Owner, req.TTL, req.Drift
		batch = append(batch, driver.Refresh{Grant: g, TTL: ttl})
	}
	// One batch with every node up: each node's expiry is then known (a
	// TryLock decided at a quorum may not have heard the third node).
	if err := br.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := srvs[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer srvs[2].Resume()
	start := time.Now()
	if err := br.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	for i, r := range batch {
		if r.Err != nil || r.Validity != ttl {
			t.Errorf("lease %d: validity %v, err %v", i, r.Validity, r.Err)
		}
	}
	if took > nodeTimeout/2 {
		t.Errorf("the batch took %v with one node of three paused: it waited for the paused node (node timeout %v)", took, nodeTimeout)
	}
}

// A lease held on a bare majority releases even when one node of that
// majority is silent: released on one, absent from another, the lock is off
// a majority (the soak found such releases failing and the lease reported
// lost though nothing was wrong).
func TestReleaseOfBareMajorityWithSilentNode(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	l := newLocker(t, srvs)
	admins := clients(t, srvs, false)
	const key = "bare-majority"
	lock := redisnode.KeysFor(redis.DefaultPrefix, key).Lock
	// A stray lock on node 2: the lease gets {0,1}.
	if err := admins[2].Set(ctx, lock, "stray", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ls, err := l.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := admins[2].Del(ctx, lock).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srvs[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer srvs[0].Resume()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("release with the lock on {0,1} and node 0 silent: %v", err)
	}
	if errors.Is(ls.Err(), distlock.ErrLeaseLost) {
		t.Errorf("the lease ended as lost: %v", ls.Err())
	}
}
