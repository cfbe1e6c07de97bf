package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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
	r, err := c.index(replica)
	if err != nil {
		return err
	}
	m, err := c.masterOf(ctx, r)
	if err != nil {
		return err
	}
	a := c.admin[r]
	if err := a.ConfigSet(ctx, "masteruser", "testserver-cut-off").Err(); err != nil {
		return fmt.Errorf("testserver: cut off %s: %w", replica.Addr(), err)
	}
	if err := a.ConfigSet(ctx, "masterauth", "none").Err(); err != nil {
		return fmt.Errorf("testserver: cut off %s: %w", replica.Addr(), err)
	}
	if err := a.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		return fmt.Errorf("testserver: cut off %s: %w", replica.Addr(), err)
	}
	err = poll(ctx, func(ctx context.Context) error {
		info, err := c.admin[r].Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if infoField(info, "master_link_status") != "down" {
			return fmt.Errorf("%s: replication link still up", replica.Addr())
		}
		info, err = c.admin[m].Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, fmt.Sprintf(",port=%d,", replica.port)) {
			return fmt.Errorf("master %s still has a connection to %s", c.Nodes[m].Addr(), replica.Addr())
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
	r, err := c.index(replica)
	if err != nil {
		return err
	}
	m, err := c.masterOf(ctx, r)
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

// live reports whether s is running and not paused, so that a request to
// it gets an answer.
func (s *Server) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked() && !s.paused
}

func (c *RedisCluster) anyLive() (int, error) {
	for i, s := range c.Nodes {
		if s.live() {
			return i, nil
		}
	}
	return -1, errors.New("testserver: no live node in the redis cluster")
}

func (c *RedisCluster) index(s *Server) (int, error) {
	for i, n := range c.Nodes {
		if n == s {
			return i, nil
		}
	}
	return -1, errors.New("testserver: server is not a node of this redis cluster")
}

func (c *RedisCluster) byID(id string) *Server {
	for i, s := range c.ids {
		if s == id {
			return c.Nodes[i]
		}
	}
	return nil
}

// masterOf returns the index of the master replica r follows, by r's own view.
func (c *RedisCluster) masterOf(ctx context.Context, r int) (int, error) {
	view, err := c.view(ctx, r)
	if err != nil {
		return -1, err
	}
	me := view[c.ids[r]]
	if !me.flags["slave"] {
		return -1, fmt.Errorf("testserver: %s is not a replica", c.Nodes[r].Addr())
	}
	for i, id := range c.ids {
		if id == me.master {
			return i, nil
		}
	}
	return -1, fmt.Errorf("testserver: %s follows unknown node %q", c.Nodes[r].Addr(), me.master)
}

func (c *RedisCluster) stateOK(ctx context.Context, i int) error {
	info, err := c.admin[i].ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if st := infoField(info, "cluster_state"); st != "ok" {
		return fmt.Errorf("%s: cluster_state:%s", c.Nodes[i].Addr(), st)
	}
	return nil
}

// synced reports whether replica r has a live link and its initial sync is done.
func (c *RedisCluster) synced(ctx context.Context, r int) error {
	info, err := c.admin[r].Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if infoField(info, "master_link_status") != "up" || infoField(info, "master_sync_in_progress") != "0" {
		return fmt.Errorf("replica %s not in sync yet", c.Nodes[r].Addr())
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	flags  map[string]bool // myself, master, slave, fail?, fail, handshake, noaddr, ...
	master string          // id of the master of a replica
	ranges [][2]int        // slot ranges served, inclusive
}

func (n clusterNode) serves(slot int) bool {
	for _, r := range n.ranges {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// view returns node i's view of the cluster, by node id.
func (c *RedisCluster) view(ctx context.Context, i int) (map[string]clusterNode, error) {
	text, err := c.admin[i].ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", c.Nodes[i].Addr(), err)
	}
	return parseClusterNodes(text)
}

// parseClusterNodes parses the CLUSTER NODES format:
// <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
func parseClusterNodes(text string) (map[string]clusterNode, error) {
	nodes := map[string]clusterNode{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES: bad line %q", line)
		}
		n := clusterNode{id: f[0], flags: map[string]bool{}}
		for _, fl := range strings.Split(f[2], ",") {
			n.flags[fl] = true
		}
		if f[3] != "-" {
			n.master = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES: bad slot range %q", s)
			}
			n.ranges = append(n.ranges, [2]int{a, b})
		}
		nodes[n.id] = n
	}
	return nodes, nil
}

// infoField returns the value of "name:value" in INFO or CLUSTER INFO output.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
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
