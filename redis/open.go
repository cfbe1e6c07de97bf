package redis

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

// open is the Opener of redis:// and rediss:// URLs. Parameters:
//
//	prefix=app:locks:     WithKeyPrefix
//	wait_replicas=1       WithWaitReplicas (with wait_timeout, default 1s)
//	wait_timeout=500ms
//	eviction=warn|refuse|ignore   WithEvictionCheck
//	fair=true             WithFairQueue (with fair_window, default 250ms)
//	fair_window=100ms
//
// and every go-redis ParseURL parameter (db in the path, dial_timeout, …);
// anything else is an error. A URL without a host is ErrInvalidURL. The
// server must answer a PING within the dial timeout (default 5s, and never
// past ctx): otherwise Open fails with an error matching ErrUnavailable.
func open(ctx context.Context, u *url.URL, opts []distlock.Option) (driver.Backend, error) {
	if u.Host == "" || u.Hostname() == "" || strings.Contains(u.Host, ",") {
		return nil, fmt.Errorf("%w: %s://… has no host (want %s://host:6379)", distlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%w: bad port %q", distlock.ErrInvalidURL, p)
		}
	}
	q := driver.NewQuery(u)
	var bopts []distlock.Option
	if p, ok := q.String("prefix"); ok {
		bopts = append(bopts, WithKeyPrefix(p))
	}
	n, hasN := q.Int("wait_replicas")
	timeout, hasT := q.Duration("wait_timeout")
	if !hasT {
		timeout = time.Second
	}
	if hasN || hasT {
		bopts = append(bopts, WithWaitReplicas(n, timeout))
	}
	if s, ok := q.String("eviction"); ok {
		switch s {
		case "warn":
			bopts = append(bopts, WithEvictionCheck(EvictionWarn))
		case "refuse":
			bopts = append(bopts, WithEvictionCheck(EvictionRefuse))
		case "ignore":
			bopts = append(bopts, WithEvictionCheck(EvictionIgnore))
		default:
			return nil, fmt.Errorf("%w: parameter eviction=%q: want warn, refuse or ignore", distlock.ErrInvalidURL, s)
		}
	}
	fair, hasFair := q.Bool("fair")
	window, hasWindow := q.Duration("fair_window")
	if (hasFair && fair) || (hasWindow && !hasFair) {
		bopts = append(bopts, WithFairQueue(window))
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	opts = append(append(bopts, opts...), WithCloseClient(true))
	o, err := driver.ResolveBackend("redis", opts)
	if err != nil {
		return nil, err // before dialling
	}
	// What is left is go-redis's to read (and to reject if unknown).
	u2 := *u
	u2.RawQuery = q.Rest().Encode()
	copt, err := goredis.ParseURL(u2.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", distlock.ErrInvalidURL, err)
	}
	copt.ContextTimeoutEnabled = true
	if copt.DialTimeout <= 0 || copt.DialTimeout > setupTimeout {
		copt.DialTimeout = setupTimeout
	}
	client := goredis.NewClient(copt)
	unroute := redisnode.RouteLogs(o.Logger) // the client is ours, so are its logs
	pctx, cancel := context.WithTimeout(ctx, copt.DialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		unroute()
		return nil, driver.Unavailable(copt.Addr, err)
	}
	b, err := newBackend(pctx, client, opts)
	if err != nil {
		_ = client.Close()
		unroute()
		return nil, err
	}
	b.unroute = unroute
	return b, nil
}
