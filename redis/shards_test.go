package redis_test

// Batched renewal on cluster-mode servers and wrapped cluster clients,
// including a batched script that carries many locks in one call.

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// wrappedCluster is a ClusterClient behind a type of the user's (any
// goredis.UniversalClient is accepted): RefreshBatch's type switch does not
// see a *goredis.ClusterClient, so it pipelines.
type wrappedCluster struct{ *goredis.ClusterClient }

// RefreshBatch declines only *ClusterClient and *Ring by concrete type. On a
// wrapped cluster client its pipeline must still route each lock to its
// slot: a script call carrying locks of many slots gets CROSSSLOT for all.
func TestWrappedClusterRefreshBatch(t *testing.T) {
	cl := testserver.NewRedisCluster(t, 3)
	c := wrappedCluster{goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})}
	t.Cleanup(func() { _ = c.Close() })
	checkRefreshBatch(t, c, "wc-")
}

// A plain *goredis.Client on a cluster-mode server that owns every slot (a
// one-shard cluster; managed "cluster mode" endpoints look like this): each
// lock's keys share a slot, so acquire and single refresh work, but the
// server refuses a script whose keys span slots even when it owns them all.
// RefreshBatch does not decline for a *Client, so one script call per lock.
func TestOneShardClusterPlainClientRefreshBatch(t *testing.T) {
	cl := testserver.NewRedisCluster(t, 1)
	c := goredis.NewClient(&goredis.Options{Addr: cl.Nodes[0].Addr()})
	t.Cleanup(func() { _ = c.Close() })
	checkRefreshBatch(t, c, "os-")
}

// checkRefreshBatch takes ten locks through a backend on c, refreshes each
// alone, then all in one RefreshBatch: every one must come back held.
func checkRefreshBatch(t *testing.T, c goredis.UniversalClient, prefix string) {
	t.Helper()
	b, err := redis.NewBackend(c)
	if err != nil {
		t.Fatal(err)
	}
	br := b
	ctx := t.Context()
	var batch []driver.Refresh
	for i := range 10 {
		req := driver.Request{Key: fmt.Sprint(prefix, i), TTL: time.Minute, Owner: fmt.Sprint("owner-", i)}
		g, err := b.TryLock(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		g.Key, g.Owner, g.TTL = req.Key, req.Owner, req.TTL // as the portable layer fills them
		if _, err := b.Refresh(ctx, g, time.Minute); err != nil {
			t.Fatalf("single refresh: %v", err)
		}
		batch = append(batch, driver.Refresh{Grant: g, TTL: time.Minute})
	}
	if err := br.RefreshBatch(ctx, batch); err != nil {
		t.Skipf("declined: %v", err)
	}
	for i, r := range batch {
		if r.Err != nil {
			t.Errorf("lease %d (held): %v", i, r.Err)
		}
	}
}

// End to end: auto-renewing leases on that one-shard cluster (plain client)
// are all kept (with a script call carrying many locks, every batched
// renewal failed CROSSSLOT and over a hundred of 1,000 leases were lost).
func TestOneShardClusterPlainClientRenewal(t *testing.T) {
	cl := testserver.NewRedisCluster(t, 1)
	c := goredis.NewClient(&goredis.Options{Addr: cl.Nodes[0].Addr(), ContextTimeoutEnabled: true})
	l, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 300
	leases := renewingLeases(t, l, "e2e-", n)
	time.Sleep(3 * time.Second)
	lost := 0
	for i, ls := range leases {
		if err := ls.Err(); err != nil {
			lost++
			if lost <= 2 {
				t.Logf("lease %d: %v", i, err)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d renewing leases lost", lost, n)
	}
}
