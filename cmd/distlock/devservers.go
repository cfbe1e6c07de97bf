package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/postgres"
)

const devServersHelp = `
Usage: distlock dev-servers [--dir DIR] [--urls FILE]

Starts a server of every kind on free loopback ports, for trying the
library: one redis-server, three more for Redlock, etcd, ZooKeeper and
PostgreSQL (trust auth, user postgres; its lock and fence tables
created). It prints each backend's URL, and
export lines for DISTLOCK_URL and DATABASE_URL, then keeps the servers until
it gets SIGINT or SIGTERM, when it stops them and removes their data. A
server whose binary is missing is skipped with a note (scripts/setup.sh
installs them). scripts/dev-servers.sh start|stop|status runs this in the
background.

--urls FILE writes the same lines to FILE once every server is ready (the
script waits for it).

--pids FILE writes each server's kind, process id and address to FILE.

--ports default asks for the usual ports: redis 6379, redlock 6380-6382,
etcd 2379, ZooKeeper 2181, PostgreSQL 5432; a backend whose port is taken
gets free ports instead, with a note. --ports any uses free ports for all.
`

// devServer is one backend's servers and the URL that reaches them.
type devServer struct {
	name, scheme string
	kind         testserver.Kind
	n            int
	ports        []int // the usual client ports, one per server
	url          func(*testserver.Cluster) string
}

func devServerKinds() []devServer {
	hosts := func(c *testserver.Cluster) string { return strings.Join(c.Endpoints(), ",") }
	return []devServer{
		{"redis", "redis", testserver.KindRedis, 1, []int{6379}, func(c *testserver.Cluster) string { return "redis://" + hosts(c) + "/0" }},
		{"redlock", "redlock", testserver.KindRedis, 3, []int{6380, 6381, 6382}, func(c *testserver.Cluster) string { return "redlock://" + hosts(c) }},
		{"etcd", "etcd", testserver.KindEtcd, 1, []int{2379}, func(c *testserver.Cluster) string { return "etcd://" + hosts(c) }},
		{"zookeeper", "zk", testserver.KindZooKeeper, 1, []int{2181}, func(c *testserver.Cluster) string { return "zk://" + hosts(c) + "/distlock" }},
		{"postgres", "postgres", testserver.KindPostgres, 1, []int{5432}, func(c *testserver.Cluster) string { return c.Members[0].DSN() }},
	}
}

func cmdDevServers(ctx context.Context, args []string, s stdio) int {
	fs := newFlags("dev-servers", devServersHelp, s)
	dir := fs.String("dir", "", "where the servers keep their data (default: a new temporary directory)")
	urls := fs.String("urls", "", "also write the URLs and export lines to this `file` once all are ready")
	pids := fs.String("pids", "", "write each server's kind, process id and address to this `file` once all are ready")
	ports := fs.String("ports", "default", "`default` (the usual ports where free) or any (free ports)")
	if code, ok := parseFlags(fs, args, s); !ok {
		return code
	}
	if *ports != "default" && *ports != "any" {
		fmt.Fprintf(s.err, "distlock dev-servers: --ports %q: want default or any\n", *ports)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := devDir(*dir)
	if err != nil {
		fmt.Fprintf(s.err, "distlock dev-servers: %v\n", err)
		return exitFailure
	}
	defer os.RemoveAll(root)
	lines, clusters := startDevServers(ctx, root, *ports == "default", s)
	defer func() {
		for _, c := range clusters {
			_ = c.Close()
		}
	}()
	if ctx.Err() != nil {
		return exitFailure
	}
	if len(clusters) == 0 {
		fmt.Fprintln(s.err, "distlock dev-servers: no server could be started")
		return exitUnavailable
	}
	text := strings.Join(lines, "\n") + "\n"
	fmt.Fprint(s.out, text)
	if err := writeDevFiles(*pids, devPIDs(clusters), *urls, text); err != nil {
		fmt.Fprintf(s.err, "distlock dev-servers: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(s.err, "distlock dev-servers: ready; stop with Ctrl-C or SIGTERM")
	<-ctx.Done()
	fmt.Fprintln(s.err, "distlock dev-servers: stopping")
	return exitOK
}

// devDir makes the data directory: dir itself, or a new temporary one.
func devDir(dir string) (string, error) {
	if dir == "" {
		return os.MkdirTemp("", "distlock-dev-")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(dir, "servers-")
}

// startDevServers starts every kind in parallel and returns the lines to
// print (in a fixed order) and the clusters to close.
func startDevServers(ctx context.Context, root string, usual bool, s stdio) ([]string, []*testserver.Cluster) {
	kinds := devServerKinds()
	got := make([]*testserver.Cluster, len(kinds))
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			var opts []testserver.Option
			if usual {
				opts = append(opts, testserver.WithPreferredPorts(k.ports...))
			}
			got[i], errs[i] = testserver.StartCluster(sctx, k.kind, k.n, root, opts...)
		})
	}
	wg.Wait()
	var lines, exports []string
	var clusters []*testserver.Cluster
	for i, k := range kinds {
		switch {
		case errors.Is(errs[i], testserver.ErrMissing):
			fmt.Fprintf(s.err, "distlock dev-servers: %s skipped: %v (scripts/setup.sh installs it)\n", k.name, errs[i])
			continue
		case errs[i] != nil:
			fmt.Fprintf(s.err, "distlock dev-servers: %s did not start: %v\n", k.name, errs[i])
			continue
		}
		clusters = append(clusters, got[i])
		if usual && got[i].Members[0].Port() != k.ports[0] {
			fmt.Fprintf(s.err, "distlock dev-servers: %s: port %d is taken, using free ports\n", k.name, k.ports[0])
		}
		u := k.url(got[i])
		if k.kind == testserver.KindPostgres {
			if err := migrateDev(ctx, u); err != nil {
				fmt.Fprintf(s.err, "distlock dev-servers: postgres tables not created: %v\n", err)
			}
		}
		lines = append(lines, fmt.Sprintf("%-10s %s", k.name, u))
		switch k.name {
		case "redis":
			exports = append(exports, "export DISTLOCK_URL='"+u+"'")
		case "postgres":
			exports = append(exports, "export DATABASE_URL='"+u+"'")
		}
	}
	return append(lines, exports...), clusters
}

// writeFileAtomic writes text to path through a rename, so a reader sees
// the whole file or none.
func writeFileAtomic(path, text string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".urls-")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// migrateDev creates the postgres backend's lock table and the fence
// table, as a user's setup would once.
func migrateDev(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		return err
	}
	return fencing.Migrate(ctx, pool)
}

// devPIDs lists each server as "kind pid address", one a line.
func devPIDs(clusters []*testserver.Cluster) string {
	var b strings.Builder
	for _, c := range clusters {
		for _, m := range c.Members {
			fmt.Fprintf(&b, "%s %d %s\n", m.Kind(), m.PID(), m.Addr())
		}
	}
	return b.String()
}

// writeDevFiles writes the pids file, then the urls file (last: the script
// waits for it); an empty path is skipped.
func writeDevFiles(pidsPath, pids, urlsPath, urls string) error {
	for _, f := range [][2]string{{pidsPath, pids}, {urlsPath, urls}} {
		if f[0] == "" {
			continue
		}
		if err := writeFileAtomic(f[0], f[1]); err != nil {
			return err
		}
	}
	return nil
}
