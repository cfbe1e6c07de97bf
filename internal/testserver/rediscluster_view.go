package testserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

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

// masterOf returns the indexes of replica and of the master it follows, by
// replica's own view.
func (c *RedisCluster) masterOf(ctx context.Context, replica *Server) (r, m int, err error) {
	r, err = c.index(replica)
	if err != nil {
		return -1, -1, err
	}
	view, err := c.view(ctx, r)
	if err != nil {
		return -1, -1, err
	}
	me := view[c.ids[r]]
	if !me.flags["slave"] {
		return -1, -1, fmt.Errorf("testserver: %s is not a replica", c.Nodes[r].Addr())
	}
	for i, id := range c.ids {
		if id == me.master {
			return r, i, nil
		}
	}
	return -1, -1, fmt.Errorf("testserver: %s follows unknown node %q", c.Nodes[r].Addr(), me.master)
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
