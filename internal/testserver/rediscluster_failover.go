package testserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Shard returns the master that serves key's hash slot and its replica, as
// the live nodes see the cluster now. replica is nil if the master has
// none (as after Failover, whose old master is dead).
func (c *RedisCluster) Shard(ctx context.Context, key string) (master, replica *Server, err error) {
	i, err := c.anyLive()
	if err != nil {
		return nil, nil, err
	}
	slot, err := c.admin[i].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("testserver: CLUSTER KEYSLOT: %w", err)
	}
	view, err := c.view(ctx, i)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range view {
		if n.flags["master"] && !n.flags["fail"] && n.serves(int(slot)) {
			master = c.byID(n.id)
			for _, r := range view {
				if r.master == n.id && !r.flags["fail"] {
					replica = c.byID(r.id)
				}
			}
		}
	}
	if master == nil {
		return nil, nil, fmt.Errorf("testserver: no live master serves slot %d of %q", slot, key)
	}
	return master, replica, nil
}

// CutOff stops replica from replicating: it keeps running and serving
// (stale) reads, and stays its master's replica in the cluster's view, but
// misses every write its master takes from now on, like a replica behind a
// broken link. It is made to log in to its master as a user that does not
// exist, and its link is dropped; it returns once the master has no
// connection to it left. (SIGSTOP would not do: the writes would wait in
// the socket buffer and be applied on SIGCONT.) The cut is not undone;
// Failover promotes the replica with what it has.
func (c *RedisCluster) CutOff(ctx context.Context, replica *Server) error {
	r, m, err := c.masterOf(ctx, replica)
	if err != nil {
		return err
	}
	return cutOff(ctx, c.admin[r], c.admin[m], replica, c.Nodes[m])
}

// cutOff stops replica (ra its admin client) from replicating master (ma
// its admin client): see RedisCluster.CutOff.
func cutOff(ctx context.Context, ra, ma *redis.Client, replica, master *Server) error {
	if err := ra.ConfigSet(ctx, "masteruser", "testserver-cut-off").Err(); err != nil {
		return fmt.Errorf("testserver: cut off %s: %w", replica.Addr(), err)
	}
	if err := ra.ConfigSet(ctx, "masterauth", "none").Err(); err != nil {
		return fmt.Errorf("testserver: cut off %s: %w", replica.Addr(), err)
	}
	if err := ra.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		return fmt.Errorf("testserver: cut off %s: %w", replica.Addr(), err)
	}
	err := poll(ctx, func(ctx context.Context) error {
		info, err := ra.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if infoField(info, "master_link_status") != "down" {
			return fmt.Errorf("%s: replication link still up", replica.Addr())
		}
		info, err = ma.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, fmt.Sprintf(",port=%d,", replica.port)) {
			return fmt.Errorf("master %s still has a connection to %s", master.Addr(), replica.Addr())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("testserver: cut off %s: %w", replica.Addr(), err)
	}
	return nil
}

// Failover kills replica's master with SIGKILL and promotes replica with
// CLUSTER FAILOVER TAKEOVER, which needs no agreement from the dead master
// and takes the replica as it is, however far behind. It returns once
// every live node sees replica as the master of those slots and reports
// cluster_state:ok.
func (c *RedisCluster) Failover(ctx context.Context, replica *Server) error {
	r, m, err := c.masterOf(ctx, replica)
	if err != nil {
		return err
	}
	before, err := c.view(ctx, r)
	if err != nil {
		return err
	}
	slots := before[c.ids[m]].ranges
	if len(slots) == 0 {
		return fmt.Errorf("testserver: the master of %s serves no slots", replica.Addr())
	}
	if err := c.Nodes[m].Kill(); err != nil {
		return err
	}
	if err := c.admin[r].Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		return fmt.Errorf("testserver: CLUSTER FAILOVER TAKEOVER on %s: %w", replica.Addr(), err)
	}
	err = poll(ctx, func(ctx context.Context) error {
		for i := range c.Nodes {
			if !c.Nodes[i].live() {
				continue
			}
			if err := c.stateOK(ctx, i); err != nil {
				return err
			}
			view, err := c.view(ctx, i)
			if err != nil {
				return err
			}
			n := view[c.ids[r]]
			if !n.flags["master"] {
				return fmt.Errorf("%s does not see %s as a master yet", c.Nodes[i].Addr(), replica.Addr())
			}
			for _, rg := range slots {
				if !n.serves(rg[0]) || !n.serves(rg[1]) {
					return fmt.Errorf("%s does not see %s serving slots %d-%d yet", c.Nodes[i].Addr(), replica.Addr(), rg[0], rg[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("testserver: fail over to %s: %w", replica.Addr(), err)
	}
	return nil
}
