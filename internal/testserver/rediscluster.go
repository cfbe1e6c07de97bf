package testserver

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSlots = 16384
	// clusterNodeTimeout is cluster-node-timeout: short so a killed node is
	// flagged soon, yet long enough that a loaded machine's stalls do not
	// get live nodes flagged as failing.
	clusterNodeTimeout = 2 * time.Second
	clusterTimeout     = 60 * time.Second // default bound on forming the cluster
)

// RedisCluster is a Redis Cluster of masters with one replica each, for
// tests of what a failover does to locks and tokens. Replicas are promoted
// only by Failover (cluster-replica-no-failover), so a stalled machine cannot
// reshuffle roles under a test.
type RedisCluster struct {
	// Nodes are the servers: Nodes[i] (i < masters) started as the master
	// of the i-th slot range, Nodes[masters+i] as its replica. Failover
	// changes roles; Shard says who serves a key now.
	Nodes []*Server

	ids   []string        // cluster node id of Nodes[i]
	admin []*redis.Client // a client on Nodes[i]
}

// NewRedisCluster starts 2×masters redis-servers with cluster-enabled yes and
// forms a cluster of them: masters that split the 16384 slots evenly, each
// with one replica. It returns once every node reports cluster_state:ok and
// every replica has finished its initial sync. The servers persist nothing
// unless WithRedisAppendFsync is given. A missing redis-server skips the
// test (fails it when CI is "true").
func NewRedisCluster(t testing.TB, masters int, opts ...Option) *RedisCluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("testserver: a redis cluster needs at least one master, got %d", masters)
	}
	cfg := newConfig(opts)
	sp, err := redisClusterSpec(cfg)
	nodes := startGroup(t, cfg, 2*masters, mustSpec(t, sp, err))
	c := &RedisCluster{Nodes: nodes, ids: make([]string, len(nodes))}
	for _, s := range nodes {
		c.admin = append(c.admin, redis.NewClient(&redis.Options{
			Addr: s.Addr(), ContextTimeoutEnabled: true,
			MaxRetries: -1, // a request to a killed node fails at once; callers poll
		}))
	}
	// Registered after the servers' cleanups, so it runs before them.
	t.Cleanup(func() {
		for _, a := range c.admin {
			_ = a.Close()
		}
	})
	timeout := clusterTimeout
	if cfg.startTimeout > 0 {
		timeout = cfg.startTimeout
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	begin := time.Now()
	if err := c.create(ctx, masters); err != nil {
		t.Fatalf("testserver: form a redis cluster: %v\n%s", err, c.logTails())
	}
	t.Logf("testserver: redis cluster of %d masters and %d replicas formed in %v", masters, masters, time.Since(begin).Round(time.Millisecond))
	return c
}

// redisClusterSpec is redisSpec with cluster mode on. Each node gets a
// second port for its cluster bus: the default, port+10000, may be taken or
// beyond 65535.
func redisClusterSpec(cfg *config) (spec, error) {
	sp, err := redisSpec(cfg)
	if err != nil {
		return sp, err
	}
	base := sp.setup
	sp.nports = 2
	sp.setup = func(ms []*Server) error {
		if err := base(ms); err != nil {
			return err
		}
		for _, s := range ms {
			conf := []string{
				"cluster-enabled yes",
				"cluster-config-file nodes.conf", // in Dir()
				fmt.Sprintf("cluster-port %d", s.ports[1]),
				fmt.Sprintf("cluster-node-timeout %d", clusterNodeTimeout.Milliseconds()),
				"cluster-replica-no-failover yes",
				// A new replica syncs at once, not after the default 5 s
				// wait for more replicas to share the transfer.
				"repl-diskless-sync-delay 0",
			}
			f, err := os.OpenFile(s.args[0], os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString(strings.Join(conf, "\n") + "\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return sp, nil
}

// create joins the started nodes into a cluster and waits until it is whole.
func (c *RedisCluster) create(ctx context.Context, masters int) error {
	for i, a := range c.admin {
		id, err := a.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", c.Nodes[i].Addr(), err)
		}
		c.ids[i] = id
		// Distinct epochs up front, as redis-cli --cluster create does, so
		// the nodes need not resolve epoch collisions among themselves.
		if err := a.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", c.Nodes[i].Addr(), err)
		}
	}
	for i := range masters {
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		if err := c.admin[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, c.Nodes[i].Addr(), err)
		}
	}
	for _, s := range c.Nodes[1:] {
		if err := c.admin[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.port, s.ports[1]).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", s.Addr(), err)
		}
	}
	// A replica can follow only a master it knows: wait until the gossip
	// has reached everyone.
	err := poll(ctx, func(ctx context.Context) error {
		for i := range c.Nodes {
			view, err := c.view(ctx, i)
			if err != nil {
				return err
			}
			for _, n := range view {
				if n.flags["handshake"] || n.flags["noaddr"] {
					return fmt.Errorf("%s: node %s still in handshake", c.Nodes[i].Addr(), n.id)
				}
			}
			if len(view) != len(c.Nodes) {
				return fmt.Errorf("%s knows %d of %d nodes", c.Nodes[i].Addr(), len(view), len(c.Nodes))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range masters {
		r := masters + i
		if err := c.admin[r].Do(ctx, "CLUSTER", "REPLICATE", c.ids[i]).Err(); err != nil {
			return fmt.Errorf("CLUSTER REPLICATE on %s: %w", c.Nodes[r].Addr(), err)
		}
	}
	return poll(ctx, func(ctx context.Context) error {
		for i := range c.Nodes {
			if err := c.stateOK(ctx, i); err != nil {
				return err
			}
			view, err := c.view(ctx, i)
			if err != nil {
				return err
			}
			for j := range masters {
				if got := view[c.ids[masters+j]].master; got != c.ids[j] {
					return fmt.Errorf("%s: replica %s follows %q, not %s", c.Nodes[i].Addr(), c.Nodes[masters+j].Addr(), got, c.Nodes[j].Addr())
				}
			}
		}
		for j := range masters {
			if err := c.synced(ctx, masters+j); err != nil {
				return err
			}
		}
		return nil
	})
}

// Addrs returns the client addresses of all nodes, as seeds for a
// redis.ClusterClient. Killed nodes are included; the client skips them.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// poll calls check until it succeeds or ctx ends, and then returns check's
// last error. Each check gets a few seconds, so one that hangs on a node does
// not use up ctx.
func poll(ctx context.Context, check func(context.Context) error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// logTails returns the end of every node's log, for failure messages.
func (c *RedisCluster) logTails() string {
	var b strings.Builder
	for _, s := range c.Nodes {
		b.WriteString(s.logTail(15))
		b.WriteString("\n")
	}
	return b.String()
}
