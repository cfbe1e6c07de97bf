package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Kind names a kind of server for Start and StartCluster.
type Kind string

// The kinds of server this package starts.
const (
	KindRedis     Kind = "redis"
	KindEtcd      Kind = "etcd"
	KindZooKeeper Kind = "zookeeper"
	KindPostgres  Kind = "postgres"
)

// Start starts one server of kind outside of a test, in a new directory
// under dir (os.TempDir() if dir is ""), and waits until it is ready or ctx
// ends. The caller must Close it. An error matching ErrMissing means the
// machine lacks the server's binary.
//
// The server dies with this process on Linux (see the package doc); Close
// stops it and removes its directory.
func Start(ctx context.Context, kind Kind, dir string, opts ...Option) (*Server, error) {
	c, err := StartCluster(ctx, kind, 1, dir, opts...)
	if err != nil {
		return nil, err
	}
	return c.Members[0], nil
}

// StartCluster starts n servers of kind outside of a test, like Start: an
// etcd cluster or ZooKeeper ensemble of n members, or n independent
// redis-servers (for Redlock). PostgreSQL supports only n == 1. The caller
// must Close the cluster.
func StartCluster(ctx context.Context, kind Kind, n int, dir string, opts ...Option) (*Cluster, error) {
	if ctx == nil {
		return nil, errors.New("testserver: nil context")
	}
	cfg := newConfig(opts)
	var sp spec
	var err error
	switch kind {
	case KindRedis:
		sp, err = redisSpec(cfg)
	case KindEtcd:
		sp, err = etcdSpec(cfg)
	case KindZooKeeper:
		sp, err = zkSpec(cfg, n)
	case KindPostgres:
		if n != 1 {
			return nil, fmt.Errorf("testserver: postgres supports one server, not %d", n)
		}
		sp, err = pgSpec(cfg)
	default:
		return nil, fmt.Errorf("testserver: unknown kind %q", kind)
	}
	if err != nil {
		return nil, err
	}
	if dir == "" {
		dir = os.TempDir()
	}
	var (
		mu      sync.Mutex
		created []string // every member directory of every attempt
	)
	ms, err := startGroupCtx(ctx, cfg, n, sp, groupHooks{
		dir: func() (string, error) {
			d, err := os.MkdirTemp(dir, "distlock-"+string(kind)+"-")
			if err == nil {
				mu.Lock()
				created = append(created, d)
				mu.Unlock()
			}
			return d, err
		},
		created: func(s *Server) { s.ownDir = true },
		logf:    func(string, ...any) {},
	})
	if err != nil {
		for _, d := range created {
			_ = os.RemoveAll(d)
		}
		return nil, err
	}
	// Remove the directories of failed attempts, which no member uses.
	used := map[string]bool{}
	for _, s := range ms {
		used[s.dir] = true
	}
	for _, d := range created {
		if !used[d] {
			_ = os.RemoveAll(d)
		}
	}
	return &Cluster{Members: ms}, nil
}

// Close kills the server, waits until it is gone and, for a server from
// Start or StartCluster, removes its directory. Servers of tests are
// closed by their t.Cleanup; calling Close on them too is harmless.
func (s *Server) Close() error {
	err := s.Kill()
	if s.ownDir && err == nil {
		err = os.RemoveAll(s.dir)
	}
	return err
}

// Close closes every member (see Server.Close) and returns the errors.
func (c *Cluster) Close() error {
	var errs []error
	for _, m := range c.Members {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// Kind returns the server's kind.
func (s *Server) Kind() Kind { return Kind(s.kind) }
