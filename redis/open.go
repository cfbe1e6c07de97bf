package redis

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
	"github.com/distlock/distlock/internal/redisnode"
)

// open is the Opener of redis:// and rediss:// URLs. Parameters:
//
//	prefix=app:locks:     WithKeyPrefix
//	wait_replicas=1       WithWaitReplicas (with wait_timeout, default 1s)
//	wait_timeout=500ms
//	eviction=warn|refuse|ignore   WithEvictionCheck
//	fair=false            WithoutFairQueue (the default is a fair queue)
//	fair_window=100ms     WithFairQueue
//	master_name=mymaster  Sentinel: the host (and addr=host:port, repeated)
//	                      are Sentinels (go-redis's ParseFailoverURL)
//
// the TLS and credential parameters of package driver/urlparam (tls, ca_file,
// cert_file, key_file, server_name, skip_verify, password_file), and every
// other go-redis ParseURL parameter (db in the path, dial_timeout, …);
// anything else is an error. A URL without a host is ErrInvalidURL. The
// server must answer a PING within the dial timeout (default 5s, and never
// past ctx): otherwise Open fails with an error matching ErrUnavailable,
// or ErrAccessDenied when the server refused the credentials or the TLS
// handshake.
func open(ctx context.Context, u *url.URL, opts []driver.Option) (driver.Backend, error) {
	if u.Host == "" || u.Hostname() == "" || strings.Contains(u.Host, ",") {
		return nil, fmt.Errorf("%w: %s://… has no host (want %s://host:6379)", distlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%w: bad port %q", distlock.ErrInvalidURL, p)
		}
	}
	q := urlparam.NewQuery(u)
	bopts, err := urlOptions(q)
	if err != nil {
		return nil, err
	}
	opts = append(append(bopts, opts...), WithCloseClient(true).DriverOption())
	o, err := driver.ResolveBackend("redis", opts)
	if err != nil {
		return nil, err // before dialling
	}
	client, addr, err := urlClient(u, q, o.TLS)
	if err != nil {
		return nil, err
	}
	unroute := redisnode.RouteLogs(o.Logger) // the client is ours, so are its logs
	pctx, cancel := context.WithTimeout(ctx, client.Options().DialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		unroute()
		return nil, redisnode.DialError(addr, client.Options().TLSConfig != nil, err)
	}
	b, err := newBackend(pctx, client, opts)
	if err != nil {
		_ = client.Close()
		unroute()
		return nil, err
	}
	b.addr = addr
	b.unroute = unroute
	return b, nil
}

// urlOptions reads the backend's own parameters of q.
func urlOptions(q *urlparam.Query) ([]driver.Option, error) {
	var bopts []driver.Option
	if p, ok := q.String("prefix"); ok {
		bopts = append(bopts, WithKeyPrefix(p).DriverOption())
	}
	n, hasN := q.Int("wait_replicas")
	timeout, hasT := q.Duration("wait_timeout")
	if !hasT {
		timeout = time.Second
	}
	if hasN || hasT {
		bopts = append(bopts, WithWaitReplicas(n, timeout).DriverOption())
	}
	if s, ok := q.String("eviction"); ok {
		switch s {
		case "warn":
			bopts = append(bopts, WithEvictionCheck(EvictionWarn).DriverOption())
		case "refuse":
			bopts = append(bopts, WithEvictionCheck(EvictionRefuse).DriverOption())
		case "ignore":
			bopts = append(bopts, WithEvictionCheck(EvictionIgnore).DriverOption())
		default:
			return nil, urlparam.Malformed("eviction", s, "not warn, refuse or ignore")
		}
	}
	fair, hasFair := q.Bool("fair")
	window, hasWindow := q.Duration("fair_window")
	switch {
	case hasFair && !fair && hasWindow:
		return nil, fmt.Errorf("%w: parameter fair_window: the queue is off (fair=false)", distlock.ErrInvalidURL)
	case hasFair && !fair:
		bopts = append(bopts, WithoutFairQueue().DriverOption())
	case hasWindow:
		bopts = append(bopts, WithFairQueue(window).DriverOption())
	}
	return bopts, q.Err()
}

// urlClient makes the client u describes, with TLS (base is
// WithTLSConfig's) and credentials from the URL, and names its server(s)
// for errors. It does not connect.
func urlClient(u *url.URL, q *urlparam.Query, base *tls.Config) (*goredis.Client, string, error) {
	tp := urlparam.ReadTLS(q, u.Scheme == "rediss", base)
	user, pass, err := urlparam.Credentials(q, u)
	if err != nil {
		return nil, "", err
	}
	sentinel := q.Rest().Has("master_name")
	names := goRedisParams
	if sentinel {
		names = goRedisSentinelParams
	}
	theirs := q.Pass(names...)
	if err := q.Done(); err != nil {
		return nil, "", err
	}
	host := u.Hostname()
	if sentinel {
		host = "" // each connection checks its own host's name (tls.DialWithDialer)
	}
	cfg, err := tp.Config(host)
	if err != nil {
		return nil, "", err
	}
	// What is left is go-redis's to read (and to reject if unknown); TLS
	// and credentials are ours, so that no secret reaches its errors.
	u2 := *u
	u2.Scheme, u2.User, u2.RawQuery = "redis", nil, theirs.Encode()
	if sentinel {
		return sentinelClient(&u2, user, pass, cfg)
	}
	copt, err := goredis.ParseURL(u2.String())
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", distlock.ErrInvalidURL, err)
	}
	copt.Username, copt.Password, copt.TLSConfig = user, pass, cfg
	copt.ContextTimeoutEnabled = true
	copt.DialTimeout = dialTimeout(copt.DialTimeout)
	return goredis.NewClient(copt), copt.Addr, nil
}

// goRedisParams are the query parameters go-redis's ParseURL reads (that
// the URL's own did not), and goRedisSentinelParams those of
// ParseFailoverURL: checked here first so that a typo gets the same error
// as on every backend.
var (
	goRedisParams = []string{
		"client_name", "conn_max_idle_time", "conn_max_lifetime", "conn_max_lifetime_jitter",
		"db", "dial_timeout", "idle_timeout", "max_active_conns", "max_concurrent_dials",
		"max_conn_age", "max_idle_conns", "max_retries", "max_retry_backoff", "min_idle_conns",
		"min_retry_backoff", "pipeline_pool_size", "pipeline_read_buffer_size",
		"pipeline_write_buffer_size", "pool_fifo", "pool_size", "pool_timeout", "protocol",
		"read_timeout", "write_timeout",
	}
	goRedisSentinelParams = []string{
		"addr", "client_name", "conn_max_idle_time", "conn_max_lifetime",
		"conn_max_lifetime_jitter", "context_timeout_enabled", "db", "dial_timeout",
		"dialer_retries", "dialer_retry_timeout", "disableIdentity", "identitySuffix",
		"master_name", "max_active_conns", "max_concurrent_dials", "max_idle_conns",
		"max_retries", "max_retry_backoff", "min_idle_conns", "min_retry_backoff", "password",
		"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size",
		"pool_fifo", "pool_size", "pool_timeout", "protocol", "read_timeout", "replica_only",
		"route_by_latency", "route_by_latency_tolerance", "route_randomly", "unstable_resp3",
		"use_disconnected_replicas", "username", "write_timeout",
	}
)

// sentinelClient is urlClient for a URL with master_name: a go-redis
// failover client that asks the Sentinels (the URL's host and its addr
// parameters) for the master. The credentials log in to the master (the
// lock's ACL user), not to the Sentinels; TLS applies to both.
func sentinelClient(u *url.URL, user, pass string, cfg *tls.Config) (*goredis.Client, string, error) {
	q := u.Query()
	for _, p := range []string{"username", "password"} {
		if q.Has(p) {
			return nil, "", fmt.Errorf("%w: parameter %s: give the master's credentials as user:password@ or password_file", distlock.ErrInvalidURL, p)
		}
	}
	// Locks live on the master only; these would panic in go-redis or
	// send lock scripts to read-only replicas.
	for _, p := range []string{"route_by_latency", "route_randomly", "replica_only", "use_disconnected_replicas"} {
		if q.Has(p) {
			return nil, "", fmt.Errorf("%w: parameter %s: locks need the master", distlock.ErrInvalidURL, p)
		}
	}
	if q.Get("master_name") == "" {
		return nil, "", fmt.Errorf("%w: master_name is empty", distlock.ErrInvalidURL)
	}
	fo, err := goredis.ParseFailoverURL(u.String())
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", distlock.ErrInvalidURL, err)
	}
	fo.Username, fo.Password, fo.TLSConfig = user, pass, cfg
	fo.ContextTimeoutEnabled = true
	fo.DialTimeout = dialTimeout(fo.DialTimeout)
	addr := fmt.Sprintf("sentinel %s master %q", strings.Join(fo.SentinelAddrs, ","), fo.MasterName)
	return goredis.NewFailoverClient(fo), addr, nil
}

// dialTimeout bounds a URL's dial timeout by setupTimeout, its default.
func dialTimeout(d time.Duration) time.Duration {
	if d <= 0 || d > setupTimeout {
		return setupTimeout
	}
	return d
}
