package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// servers are the loopback servers the pairs run on, by pair id: the
// client addresses (one for redis, etcd and zk; five for redlock).
type servers struct {
	addrs    map[string][]string
	versions map[string]string // pair id → "redis 7.0.15" etc.
	missing  map[string]error  // pair id → why it has no server
	closers  []func() error
}

func (s *servers) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// startServers starts, in parallel, the servers of the wanted pairs: one
// redis-server (redis), five (redlock), a one-member etcd and a standalone
// ZooKeeper. A server that cannot start leaves its pair in missing.
func startServers(ctx context.Context, c config) *servers {
	s := &servers{addrs: map[string][]string{}, versions: map[string]string{}, missing: map[string]error{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range pairs {
		if !c.wants(p.id) {
			continue
		}
		c.note("starting %d local %s server(s) for %s", p.servers, p.kind, p.title)
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			cl, err := testserver.StartCluster(sctx, p.kind, p.servers, c.dir)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && p.kind == testserver.KindPostgres {
				err = preparePostgres(sctx, cl.Endpoints()[0])
			}
			if err != nil {
				s.missing[p.id] = err
				return
			}
			s.addrs[p.id] = cl.Endpoints()
			s.closers = append(s.closers, cl.Close)
			s.versions[p.id] = fmt.Sprintf("%d× %s", p.servers, serverVersion(sctx, p.kind, cl.Endpoints()[0]))
		})
	}
	wg.Wait()
	return s
}

// serverVersion asks the server at addr for its version; best effort.
func serverVersion(ctx context.Context, kind testserver.Kind, addr string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch kind {
	case testserver.KindRedis:
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return "redis (version unknown)"
		}
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				return "redis " + v
			}
		}
	case testserver.KindEtcd:
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: nopZap()})
		if err != nil {
			return "etcd (version unknown)"
		}
		defer c.Close()
		st, err := c.Status(ctx, addr)
		if err == nil {
			return "etcd " + st.Version
		}
	case testserver.KindPostgres:
		conn, err := pgx.Connect(ctx, pgDSN(addr))
		if err != nil {
			break
		}
		defer conn.Close(context.Background())
		var v string
		if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) == nil {
			return "PostgreSQL " + v
		}
	case testserver.KindZooKeeper:
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			break
		}
		defer conn.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(dl)
		}
		if _, err := conn.Write([]byte("srvr")); err != nil {
			break
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Zookeeper version: "); ok {
			v, _, _ = strings.Cut(v, ",")
			v, _, _ = strings.Cut(v, "-")
			return "ZooKeeper " + v
		}
	}
	return string(kind) + " (version unknown)"
}
