package testserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Cluster is a group of servers that form one etcd cluster or ZooKeeper ensemble.
type Cluster struct {
	// Members are the cluster's servers; member i is "m<i>" (etcd) or myid i+1 (ZooKeeper).
	Members []*Server
}

// Endpoints returns the client addresses of all members.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.Addr()
	}
	return eps
}

// ConnectString returns the client addresses joined by commas, a ZooKeeper
// connect string. (go-zookeeper's zk.Connect takes Endpoints instead.)
func (c *Cluster) ConnectString() string { return strings.Join(c.Endpoints(), ",") }

// Leader returns the index of the member that is currently the leader. It
// fails if no reachable member is the leader.
func (c *Cluster) Leader() (int, error) {
	for i, m := range c.Members {
		var ok bool
		var err error
		switch m.kind {
		case "etcd":
			ok, err = etcdIsLeader(m)
		case "zookeeper":
			var mode string
			mode, err = zkMode(m)
			ok = mode == "leader"
		default:
			return -1, fmt.Errorf("testserver: %s has no leader", m.kind)
		}
		if err == nil && ok {
			return i, nil
		}
	}
	return -1, errors.New("testserver: no member is the leader")
}

// Mode returns the ZooKeeper mode of member i as reported by the srvr
// command: "leader", "follower" or "standalone".
func (c *Cluster) Mode(i int) (string, error) { return zkMode(c.Members[i]) }

// Restart starts every member that is not running, concurrently, and waits
// until all of them are ready. Use it after killing a quorum of members.
func (c *Cluster) Restart(ctx context.Context) error {
	var started []*Server
	for _, m := range c.Members {
		m.mu.Lock()
		var err error
		if !m.runningLocked() {
			if err = m.killLocked(); err == nil { // reap a crashed member
				err = m.startLocked()
			}
			if err == nil {
				started = append(started, m)
			}
		}
		m.mu.Unlock()
		if err != nil {
			return err
		}
	}
	for _, m := range started {
		if err := m.waitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}
