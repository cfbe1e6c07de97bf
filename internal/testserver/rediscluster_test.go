package testserver

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// readReplica reads key on a replica itself (READONLY), not on its master.
func readReplica(ctx context.Context, t *testing.T, s *Server, key string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	conn := c.Conn()
	defer conn.Close()
	require.NoError(t, conn.ReadOnly(ctx).Err())
	v, err := conn.Get(ctx, key).Result()
	require.NoError(t, err)
	return v
}

// A cut-off replica misses the writes that follow, and Failover promotes it
// with what it has: the write it missed is gone from the cluster.
func TestRedisCluster(t *testing.T) {
	c := NewRedisCluster(t, 3)
	require.Len(t, c.Nodes, 6)
	ctx := ctxWithin(t, time.Minute)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer cc.Close()

	const key = "k"
	master, replica, err := c.Shard(ctx, key)
	require.NoError(t, err)
	require.NotNil(t, replica)
	require.NotEqual(t, master, replica)
	masters := map[*Server]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		m, _, err := c.Shard(ctx, k)
		require.NoError(t, err)
		masters[m] = true
	}
	require.Len(t, masters, 3, "keys spread over all three masters")

	require.NoError(t, cc.Set(ctx, key, "before", 0).Err())
	mc := redis.NewClient(&redis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true})
	defer mc.Close()
	n, err := mc.Wait(ctx, 1, generous).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the replica acknowledges the write before the cut")
	require.Equal(t, "before", readReplica(ctx, t, replica, key))

	require.NoError(t, c.CutOff(ctx, replica))
	require.NoError(t, cc.Set(ctx, key, "after", 0).Err())
	n, err = mc.Wait(ctx, 1, short).Result()
	require.NoError(t, err)
	require.Zero(t, n, "a cut-off replica acknowledged a write")
	require.Equal(t, "before", readReplica(ctx, t, replica, key), "the cut-off replica got the write")

	require.NoError(t, c.Failover(ctx, replica))
	require.Zero(t, master.PID(), "the old master is dead")
	m2, r2, err := c.Shard(ctx, key)
	require.NoError(t, err)
	require.Equal(t, replica, m2, "the replica serves the key's slot")
	require.Nil(t, r2)

	fresh := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer fresh.Close()
	got, err := fresh.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, "before", got, "the promoted replica has exactly what it had when cut off")
}
