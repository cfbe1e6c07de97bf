package testserver

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Redis starts a redis-server. By default it persists nothing; see
// WithRedisAppendFsync. A SAVE sent by the test writes a snapshot that
// Restart loads (after Kill, so that nothing newer is saved): a server
// come back with older data.
func Redis(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return RedisN(t, 1, opts...)[0]
}

// RedisN starts n independent redis-servers, e.g. for Redlock.
func RedisN(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	cfg := newConfig(opts)
	sp, err := redisSpec(cfg)
	return startGroup(t, cfg, n, mustSpec(t, sp, err))
}

// redisSpec describes redis-server under cfg.
func redisSpec(cfg *config) (spec, error) {
	bin, err := lookBinary("redis-server", "redis-server", "/usr/bin/redis-server")
	if err != nil {
		return spec{}, err
	}
	return spec{
		kind: "redis", nports: 1, timeout: 15 * time.Second,
		setup: func(ms []*Server) error {
			for _, s := range ms {
				conf := []string{
					fmt.Sprintf("port %d", s.port),
					"bind 127.0.0.1",
					"protected-mode no",
					"daemonize no",
					`logfile ""`, // stdout, which is the log file
					"dir .",      // the working directory, Dir()
					`save ""`,    // no automatic RDB snapshots: a restart keeps what the AOF kept, or a test's SAVE
				}
				if cfg.redisAppendFsync != "" {
					conf = append(conf, "appendonly yes", "appendfsync "+cfg.redisAppendFsync)
				}
				path := filepath.Join(s.dir, "redis.conf")
				if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
					return err
				}
				s.bin, s.args = bin, []string{path}
				s.ready = func(ctx context.Context) error { return redisPing(ctx, s.Addr()) }
			}
			return nil
		},
	}, nil
}

// redisPing sends PING over raw RESP. A server still loading its AOF answers
// -LOADING, which counts as not ready.
func redisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", strings.TrimSpace(line))
	}
	return nil
}
