package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel timing: a master that does not answer for sentinelDownAfter is
// down; a failover that stalls is given up and retried after twice
// sentinelFailoverTimeout.
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 5 * time.Second
	sentinelTimeout         = 60 * time.Second // default bound on forming the set
)

// RedisSentinel is a Redis master with one replica, monitored by three
// Sentinels (redis-server --sentinel, quorum 2) that promote the replica
// when the master stops answering for a second.
type RedisSentinel struct {
	// Master and Replica are the data servers. Failover makes the replica
	// the master (and Replica nil).
	Master, Replica *Server
	// Sentinels are the Sentinel processes.
	Sentinels []*Server
	// Name is the master name the Sentinels monitor ("mymaster").
	Name string

	admin     map[*Server]*redis.Client
	sentinels []*redis.SentinelClient
}

// NewRedisSentinel starts a master, a replica of it and three Sentinels
// monitoring it, and returns once the replica is in sync and every Sentinel
// knows the replica and the other two Sentinels. The data servers persist
// nothing unless WithRedisAppendFsync is given; they take no TLS or ACL
// options. A missing redis-server skips the test (fails it when CI is
// "true").
func NewRedisSentinel(t testing.TB, opts ...Option) *RedisSentinel {
	t.Helper()
	cfg := newConfig(opts)
	if cfg.redisSec.ca != nil || cfg.redisSec.acl != nil {
		t.Fatal("testserver: NewRedisSentinel takes neither WithRedisTLS nor WithRedisACL")
	}
	sp, err := redisSpec(cfg)
	sp = mustSpec(t, sp, err)
	base := sp.setup
	sp.setup = func(ms []*Server) error {
		if err := base(ms); err != nil {
			return err
		}
		// The replica syncs at once, not after the default wait for more.
		if err := appendConf(ms[0].args[0], "repl-diskless-sync-delay 0"); err != nil {
			return err
		}
		return appendConf(ms[1].args[0], fmt.Sprintf("replicaof 127.0.0.1 %d", ms[0].port))
	}
	nodes := startGroup(t, cfg, 2, sp)
	rs := &RedisSentinel{Master: nodes[0], Replica: nodes[1], Name: "mymaster", admin: map[*Server]*redis.Client{}}
	for _, s := range nodes {
		rs.admin[s] = redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	}
	t.Cleanup(rs.closeClients) // registered after the servers' cleanups, so it runs first
	timeout := sentinelTimeout
	if cfg.startTimeout > 0 {
		timeout = cfg.startTimeout
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	begin := time.Now()
	if err := poll(ctx, rs.replicaSynced); err != nil {
		t.Fatalf("testserver: replica %s did not sync: %v\n%s", rs.Replica.Addr(), err, rs.Replica.logTail(15))
	}
	ssp, err := sentinelSpec(rs.Name, rs.Master)
	rs.Sentinels = startGroup(t, cfg, 3, mustSpec(t, ssp, err))
	for _, s := range rs.Sentinels {
		rs.sentinels = append(rs.sentinels, redis.NewSentinelClient(&redis.Options{
			Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		}))
	}
	t.Cleanup(rs.closeClients)
	if err := poll(ctx, rs.sentinelsAgree); err != nil {
		t.Fatalf("testserver: the sentinels did not find each other and the replica: %v", err)
	}
	t.Logf("testserver: redis master, replica and 3 sentinels ready in %v", time.Since(begin).Round(time.Millisecond))
	return rs
}

// SentinelAddrs returns the Sentinels' addresses.
func (rs *RedisSentinel) SentinelAddrs() []string {
	addrs := make([]string, len(rs.Sentinels))
	for i, s := range rs.Sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// CutOff stops the replica from replicating, as RedisCluster.CutOff does:
// it keeps serving (stale) reads and stays the master's replica in the
// Sentinels' view, but misses every write the master takes from now on.
func (rs *RedisSentinel) CutOff(ctx context.Context) error {
	if rs.Replica == nil {
		return fmt.Errorf("testserver: no replica to cut off")
	}
	return cutOff(ctx, rs.admin[rs.Replica], rs.admin[rs.Master], rs.Replica, rs.Master)
}

// Failover kills the master with SIGKILL and waits until every Sentinel
// names the replica as the master and the replica has taken the role,
// however far behind it is. Master is then the promoted replica, and
// Replica nil.
func (rs *RedisSentinel) Failover(ctx context.Context) error {
	if rs.Replica == nil {
		return fmt.Errorf("testserver: no replica to fail over to")
	}
	if err := rs.Master.Kill(); err != nil {
		return err
	}
	want := rs.Replica
	err := poll(ctx, func(ctx context.Context) error {
		for i, sc := range rs.sentinels {
			addr, err := sc.GetMasterAddrByName(ctx, rs.Name).Result()
			if err != nil {
				return err
			}
			if len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != want.Addr() {
				return fmt.Errorf("sentinel %s names %v as the master, not %s", rs.Sentinels[i].Addr(), addr, want.Addr())
			}
		}
		info, err := rs.admin[want].Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if role := infoField(info, "role"); role != "master" {
			return fmt.Errorf("%s is still a %s", want.Addr(), role)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("testserver: sentinel failover to %s: %w", want.Addr(), err)
	}
	rs.Master, rs.Replica = want, nil
	return nil
}

func (rs *RedisSentinel) replicaSynced(ctx context.Context) error {
	info, err := rs.admin[rs.Replica].Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if infoField(info, "master_link_status") != "up" || infoField(info, "master_sync_in_progress") != "0" {
		return fmt.Errorf("replica %s not in sync yet", rs.Replica.Addr())
	}
	return nil
}

// sentinelsAgree checks that every Sentinel knows the replica, as a live
// replica, and the other Sentinels: a failover needs both.
func (rs *RedisSentinel) sentinelsAgree(ctx context.Context) error {
	for i, sc := range rs.sentinels {
		replicas, err := sc.Replicas(ctx, rs.Name).Result()
		if err != nil {
			return err
		}
		found := false
		for _, r := range replicas {
			found = found || (net.JoinHostPort(r["ip"], r["port"]) == rs.Replica.Addr() && r["flags"] == "slave")
		}
		if !found {
			return fmt.Errorf("sentinel %s does not know replica %s yet: %v", rs.Sentinels[i].Addr(), rs.Replica.Addr(), replicas)
		}
		peers, err := sc.Sentinels(ctx, rs.Name).Result()
		if err != nil {
			return err
		}
		if len(peers) != len(rs.sentinels)-1 {
			return fmt.Errorf("sentinel %s knows %d other sentinels, not %d", rs.Sentinels[i].Addr(), len(peers), len(rs.sentinels)-1)
		}
	}
	return nil
}

func (rs *RedisSentinel) closeClients() {
	for _, c := range rs.admin {
		_ = c.Close()
	}
	for _, c := range rs.sentinels {
		_ = c.Close()
	}
}

// sentinelSpec describes Sentinels monitoring master under name, with
// quorum 2.
func sentinelSpec(name string, master *Server) (spec, error) {
	bin, err := lookBinary("redis-server", "redis-server", "/usr/bin/redis-server")
	if err != nil {
		return spec{}, err
	}
	return spec{
		kind: "redis-sentinel", nports: 1, timeout: 15 * time.Second,
		setup: func(ms []*Server) error {
			for _, s := range ms {
				conf := []string{
					fmt.Sprintf("port %d", s.port),
					"bind 127.0.0.1",
					"protected-mode no",
					"daemonize no",
					`logfile ""`,
					"dir .",
					fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", name, master.port),
					fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, sentinelDownAfter.Milliseconds()),
					fmt.Sprintf("sentinel failover-timeout %s %d", name, sentinelFailoverTimeout.Milliseconds()),
					fmt.Sprintf("sentinel parallel-syncs %s 1", name),
				}
				// Sentinel rewrites its configuration file: it must be its own.
				path := filepath.Join(s.dir, "sentinel.conf")
				if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
					return err
				}
				s.bin, s.args = bin, []string{path, "--sentinel"}
				s.ready = func(ctx context.Context) error { return redisPing(ctx, s.Addr()) }
			}
			return nil
		},
	}, nil
}

// appendConf appends lines to a configuration file.
func appendConf(path string, lines ...string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
