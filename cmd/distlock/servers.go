package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

func schemes() []string { return distlock.Schemes() }

func registered(scheme string) bool { return slices.Contains(distlock.Schemes(), scheme) }

// target is one backend to measure.
type target struct {
	URL    string // as given, or of a local server
	Server string // what serves it, e.g. "local redis-server 7.0.15"
}

// localServers are the servers bench started itself; Close stops them.
type localServers struct {
	mu       sync.Mutex
	closers  []func() error
	notes    []string
	byScheme map[string]target
}

func (ls *localServers) Close() error {
	var errs []error
	for _, c := range ls.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// startLocal starts, in parallel, a server for every registered backend that
// needs one and whose binary is installed, and returns the targets in a
// fixed order: mem, redis, redlock, etcd, zk, postgres. Backends it cannot
// serve are reported in notes.
func startLocal(ctx context.Context, dir string, progress func(string)) ([]target, *localServers) {
	ls := &localServers{byScheme: map[string]target{}}
	add := func(scheme string, t target, closer func() error) {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		ls.byScheme[scheme] = t
		ls.closers = append(ls.closers, closer)
	}
	note := func(format string, args ...any) {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		ls.notes = append(ls.notes, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	start := func(scheme string, kind testserver.Kind, n int, urlOf func(*testserver.Cluster) string) {
		if !registered(scheme) {
			note("%s:// not measured: no backend registered for it in this build", scheme)
			return
		}
		wg.Go(func() {
			progress(fmt.Sprintf("starting %d local %s server(s) for %s://", n, kind, scheme))
			sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			c, err := testserver.StartCluster(sctx, kind, n, dir)
			if err != nil {
				note("%s:// not measured: %v", scheme, err)
				return
			}
			u := urlOf(c)
			if kind == testserver.KindPostgres {
				if err := migrateDev(sctx, u); err != nil {
					c.Close()
					note("%s:// not measured: tables not created: %v", scheme, err)
					return
				}
			}
			v := serverVersion(sctx, u)
			add(scheme, target{URL: u, Server: fmt.Sprintf("%d local %s (%s)", n, kind, v)}, c.Close)
		})
	}
	hosts := func(c *testserver.Cluster) string { return strings.Join(c.Endpoints(), ",") }
	start("redis", testserver.KindRedis, 1, func(c *testserver.Cluster) string { return "redis://" + hosts(c) + "/0" })
	start("redlock", testserver.KindRedis, 5, func(c *testserver.Cluster) string { return "redlock://" + hosts(c) })
	start("etcd", testserver.KindEtcd, 1, func(c *testserver.Cluster) string { return "etcd://" + hosts(c) })
	// A 2s session timeout keeps the crash measurement short (locks live
	// as long as the session on ZooKeeper).
	start("zk", testserver.KindZooKeeper, 1, func(c *testserver.Cluster) string {
		return "zk://" + hosts(c) + "/distlock-bench?session_timeout=2s"
	})
	start("postgres", testserver.KindPostgres, 1, func(c *testserver.Cluster) string { return c.Members[0].DSN() })
	wg.Wait()

	targets := []target{{URL: "mem://bench", Server: "in-process"}}
	for _, s := range []string{"redis", "redlock", "etcd", "zk", "postgres"} {
		if t, ok := ls.byScheme[s]; ok {
			targets = append(targets, t)
		}
	}
	return targets, ls
}

// serverVersion asks the first server of u for its version; best effort.
func serverVersion(ctx context.Context, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "unknown"
	}
	host, _, _ := strings.Cut(u.Host, ",")
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var v string
	switch u.Scheme {
	case "mem":
		return "in-process"
	case "redis", "rediss", "redlock":
		v, err = redisVersion(ctx, host)
		v = "redis " + v
	case "etcd":
		v, err = etcdVersion(ctx, host)
		v = "etcd " + v
	case "zk":
		v, err = zkVersion(ctx, host)
		v = "ZooKeeper " + v
	case "postgres", "postgresql":
		v, err = postgresVersion(ctx, rawURL)
		v = "PostgreSQL " + v
	default:
		return "unknown"
	}
	if err != nil {
		return "version unknown: " + err.Error()
	}
	return v
}

func dialCtx(ctx context.Context, host string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return c, nil
}

// redisVersion reads redis_version from INFO server over raw RESP (no
// password support: an error then, reported as unknown).
func redisVersion(ctx context.Context, host string) (string, error) {
	c, err := dialCtx(ctx, host)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.WriteString(c, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-") {
			return "", errors.New(line[1:])
		}
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errors.New("no redis_version in INFO")
}

func etcdVersion(ctx context.Context, host string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		Server string `json:"etcdserver"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	return v.Server, nil
}

// zkVersion reads the first line of the srvr four-letter command.
func zkVersion(ctx context.Context, host string) (string, error) {
	c, err := dialCtx(ctx, host)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Zookeeper version: "); ok {
		v, _, _ = strings.Cut(v, ",")
		v, _, _ = strings.Cut(v, "-") // drop the git hash
		return v, nil
	}
	if err == nil {
		err = fmt.Errorf("srvr: %q", line)
	}
	return "", err
}

// postgresVersion reads server_version over one connection.
func postgresVersion(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	v, _, _ = strings.Cut(v, " ") // drop the distribution's suffix
	return v, err
}
