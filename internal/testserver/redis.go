package testserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	cfg.redisSec.issue(t)
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
				sec, err := cfg.redisSec.conf(s)
				if err != nil {
					return err
				}
				conf = append(conf, sec...)
				path := filepath.Join(s.dir, "redis.conf")
				if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
					return err
				}
				s.bin, s.args = bin, []string{path}
				probe := cfg.redisSec.probeTLS()
				s.ready = func(ctx context.Context) error { return redisProbe(ctx, s.Addr(), probe) }
			}
			return nil
		},
	}, nil
}

// redisSecurity is what WithRedisTLS and WithRedisACL ask of a redis-server.
type redisSecurity struct {
	ca            *CA      // nil: no TLS
	server, probe KeyPair  // the server's certificate, and the readiness check's (issue)
	acl           []string // the lines of the ACL file; nil: no ACL file
}

// WithRedisTLS serves Redis over TLS only, with a certificate ca issues for
// 127.0.0.1 and localhost: Addr is the TLS port (tls-port; port 0), and a
// client must present a certificate ca signed (tls-auth-clients yes).
// Replication runs over TLS too. Only Redis and RedisN take it.
func WithRedisTLS(ca *CA) Option { return func(c *config) { c.redisSec.ca = ca } }

// WithRedisACL gives redis-server an ACL file (aclfile) of these lines, each
// an ACL SETUSER rule set such as "user app on >pw resetkeys ~app:* +get".
// A line for "default" replaces the default user ("user default off" shuts
// out clients that do not log in); the readiness check takes a NOAUTH
// answer as ready.
func WithRedisACL(lines ...string) Option {
	return func(c *config) { c.redisSec.acl = append([]string(nil), lines...) }
}

// RedisLockACL is the ACL rule set of a lock user of the redis and redlock
// backends whose keys start with prefix, as docs/security-redis.md gives
// it: the commands of the lock scripts and of the release notices, the
// keys and channels under prefix, nothing else.
func RedisLockACL(prefix string) string {
	return fmt.Sprintf("resetkeys ~%[1]s* resetchannels &%[1]s* -@all "+
		"+ping +evalsha +eval +subscribe +unsubscribe +publish +time "+
		"+get +set +del +exists +incr +pexpire +pexpireat +pttl "+
		"+hget +hset +hmget +zadd +zcount +zrange +zrangebyscore +zrem +zscore", prefix)
}

// certNames numbers the certificate files issued for Redis servers: tests
// that start several with one CA must not overwrite each other's.
var certNames atomic.Int64

// issue makes the server's and the readiness check's certificates.
func (r *redisSecurity) issue(t testing.TB) {
	t.Helper()
	if r.ca == nil {
		return
	}
	n := certNames.Add(1)
	r.server = r.ca.Server(t, fmt.Sprintf("redis-%d", n))
	r.probe = r.ca.Client(t, fmt.Sprintf("testserver-probe-%d", n))
}

// conf returns the configuration lines of s's TLS and ACL, writing its ACL
// file.
func (r *redisSecurity) conf(s *Server) ([]string, error) {
	var conf []string
	if r.ca != nil {
		if r.server.CertFile == "" {
			return nil, errors.New("WithRedisTLS needs a test: use Redis or RedisN")
		}
		conf = append(conf,
			"port 0",
			fmt.Sprintf("tls-port %d", s.port),
			fmt.Sprintf("tls-cert-file %q", r.server.CertFile),
			fmt.Sprintf("tls-key-file %q", r.server.KeyFile),
			fmt.Sprintf("tls-ca-cert-file %q", r.ca.File),
			"tls-auth-clients yes",
			"tls-replication yes",
		)
	}
	if r.acl != nil {
		path := filepath.Join(s.dir, "users.acl")
		if err := os.WriteFile(path, []byte(strings.Join(r.acl, "\n")+"\n"), 0o600); err != nil {
			return nil, err
		}
		conf = append(conf, fmt.Sprintf("aclfile %q", path))
	}
	return conf, nil
}

// probeTLS is the readiness check's TLS configuration, nil without TLS.
func (r *redisSecurity) probeTLS() *tls.Config {
	if r.ca == nil {
		return nil
	}
	return &tls.Config{
		RootCAs: r.ca.Pool(), Certificates: []tls.Certificate{r.probe.TLS},
		ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
	}
}

// redisPing sends PING over raw RESP. A server still loading its AOF answers
// -LOADING, which counts as not ready.
func redisPing(ctx context.Context, addr string) error { return redisProbe(ctx, addr, nil) }

// redisProbe is redisPing over TLS when cfg is not nil. A -NOAUTH answer
// (an ACL file shut the default user out) counts as ready.
func redisProbe(ctx context.Context, addr string, cfg *tls.Config) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if cfg != nil {
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		c = tc
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING: %q", strings.TrimSpace(line))
	}
	return nil
}
