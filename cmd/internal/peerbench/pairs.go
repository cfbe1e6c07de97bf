package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all" // every backend's URL scheme
	"github.com/distlock/distlock/internal/testserver"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// ttl is every lock's time to live on both sides: far longer than a hold,
// so no lease needs renewing (distlock's auto-renew stays off, its default).
const ttl = 10 * time.Second

// zkSessionTimeout is both sides' ZooKeeper session timeout (distlock's
// default).
const zkSessionTimeout = 10 * time.Second

// client is one worker's lock client, with its own connections. lock waits
// until key is granted and returns what unlock needs; held values are
// pointers, so passing them through any costs no allocation.
type client interface {
	lock(ctx context.Context, key string) (held any, err error)
	unlock(ctx context.Context, held any) error
	close() error
}

// side is one library of a pair on a pair's servers.
type side struct {
	name string
	open func(ctx context.Context, addrs []string, c config) (client, error)
}

// pair is a distlock backend and the peer library a user would pick instead.
type pair struct {
	id      string // --only's name
	title   string // "redis vs bsm/redislock"
	kind    testserver.Kind
	servers int
	backend string                      // distlock's backend
	url     func(addrs []string) string // distlock's URL of the servers
	peer    side
}

var pairs = []*pair{
	{id: "redis", title: "redis vs bsm/redislock", kind: testserver.KindRedis, servers: 1, backend: "redis",
		url:  func(a []string) string { return "redis://" + a[0] + "/0" },
		peer: side{name: "bsm/redislock", open: openRedislock}},
	{id: "redis-race", title: "redis ?fair=false vs bsm/redislock", kind: testserver.KindRedis, servers: 1, backend: "redis",
		url:  func(a []string) string { return "redis://" + a[0] + "/0?fair=false" },
		peer: side{name: "bsm/redislock", open: openRedislock}},
	{id: "redlock", title: "redlock(5) vs redsync", kind: testserver.KindRedis, servers: 5, backend: "redlock",
		url:  func(a []string) string { return "redlock://" + strings.Join(a, ",") },
		peer: side{name: "go-redsync/redsync", open: openRedsync}},
	{id: "etcd", title: "etcd vs concurrency.Mutex", kind: testserver.KindEtcd, servers: 1, backend: "etcd",
		url:  func(a []string) string { return "etcd://" + a[0] },
		peer: side{name: "etcd concurrency.Mutex", open: openEtcdMutex}},
	{id: "zk", title: "zookeeper vs zk.Lock", kind: testserver.KindZooKeeper, servers: 1, backend: "zookeeper",
		url: func(a []string) string {
			return "zk://" + a[0] + "/peerbench-distlock?session_timeout=" + zkSessionTimeout.String()
		},
		peer: side{name: "go-zookeeper zk.Lock", open: openZkLock}},
}

// distlock is the pair's distlock side.
func (p *pair) distlock() side { return distlockSide(p.backend, p.url) }

func pairByID(id string) *pair {
	for _, p := range pairs {
		if p.id == id {
			return p
		}
	}
	return nil
}

// distlockSide opens a Locker per worker with distlock.Open (TTL 10 s, no
// auto-renew) and locks with Acquire (waiting) + Release.
func distlockSide(backend string, url func(addrs []string) string) side {
	return side{name: "distlock " + backend, open: func(ctx context.Context, addrs []string, _ config) (client, error) {
		l, err := distlock.Open(ctx, url(addrs), distlock.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		return dlClient{l}, nil
	}}
}

type dlClient struct{ l distlock.Locker }

func (c dlClient) lock(ctx context.Context, key string) (any, error) { return c.l.Acquire(ctx, key) }
func (c dlClient) unlock(ctx context.Context, h any) error           { return h.(*distlock.Lease).Release(ctx) }
func (c dlClient) close() error                                      { return c.l.Close() }

// bsm/redislock: Obtain with a retry strategy (a fresh one per call: the
// exponential one counts), Release.

func parseRetry(s string) (func() redislock.RetryStrategy, error) {
	f := strings.Split(s, ":")
	durs := make([]time.Duration, len(f)-1)
	for i, v := range f[1:] {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q: bad duration %q", s, v)
		}
		durs[i] = d
	}
	switch {
	case f[0] == "linear" && len(durs) == 1:
		return func() redislock.RetryStrategy { return redislock.LinearBackoff(durs[0]) }, nil
	case f[0] == "exp" && len(durs) == 2:
		return func() redislock.RetryStrategy { return redislock.ExponentialBackoff(durs[0], durs[1]) }, nil
	}
	return nil, fmt.Errorf("%q: want linear:D or exp:MIN:MAX", s)
}

type redislockClient struct {
	rc    *goredis.Client
	lc    *redislock.Client
	retry func() redislock.RetryStrategy
}

func openRedislock(_ context.Context, addrs []string, c config) (client, error) {
	retry, err := parseRetry(c.retry)
	if err != nil {
		return nil, err
	}
	rc := goredis.NewClient(&goredis.Options{Addr: addrs[0]})
	return &redislockClient{rc: rc, lc: redislock.New(rc), retry: retry}, nil
}

func (c *redislockClient) lock(ctx context.Context, key string) (any, error) {
	return c.lc.Obtain(ctx, "peerbench:"+key, ttl, &redislock.Options{RetryStrategy: c.retry()})
}
func (c *redislockClient) unlock(ctx context.Context, h any) error {
	return h.(*redislock.Lock).Release(ctx)
}
func (c *redislockClient) close() error { return c.rc.Close() }

// go-redsync/redsync: one go-redis client per node, NewMutex with its
// defaults (32 tries, 50–250 ms random retry delay) but the expiry set to
// the common TTL, LockContext (called again after ErrFailed / ErrTaken while
// the context lasts: a waiting lock), UnlockContext.

type redsyncClient struct {
	rcs []*goredis.Client
	rs  *redsync.Redsync
}

func openRedsync(_ context.Context, addrs []string, _ config) (client, error) {
	c := &redsyncClient{}
	var pools []redsyncredis.Pool
	for _, a := range addrs {
		rc := goredis.NewClient(&goredis.Options{Addr: a})
		c.rcs = append(c.rcs, rc)
		pools = append(pools, redsyncgoredis.NewPool(rc))
	}
	c.rs = redsync.New(pools...)
	return c, nil
}

func (c *redsyncClient) lock(ctx context.Context, key string) (any, error) {
	m := c.rs.NewMutex("peerbench:"+key, redsync.WithExpiry(ttl))
	for {
		err := m.LockContext(ctx)
		if err == nil {
			return m, nil
		}
		var taken *redsync.ErrTaken
		var nodeTaken *redsync.ErrNodeTaken
		retry := errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken)
		if !retry || ctx.Err() != nil {
			return nil, err
		}
	}
}

func (c *redsyncClient) unlock(ctx context.Context, h any) error {
	_, err := h.(*redsync.Mutex).UnlockContext(ctx)
	return err
}

func (c *redsyncClient) close() error {
	var errs []error
	for _, rc := range c.rcs {
		errs = append(errs, rc.Close())
	}
	return errors.Join(errs...)
}

// etcd client/v3/concurrency: one client and one Session (TTL 10 s) per
// worker, NewMutex(session, prefix).Lock / Unlock.

type etcdMutexClient struct {
	cli  *clientv3.Client
	sess *concurrency.Session
}

func nopZap() *zap.Logger { return zap.NewNop() }

func openEtcdMutex(ctx context.Context, addrs []string, _ config) (client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 5 * time.Second, Logger: nopZap(), Context: ctx})
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return &etcdMutexClient{cli: cli, sess: sess}, nil
}

func (c *etcdMutexClient) lock(ctx context.Context, key string) (any, error) {
	m := concurrency.NewMutex(c.sess, "/peerbench/"+key)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

func (c *etcdMutexClient) unlock(ctx context.Context, h any) error {
	return h.(*concurrency.Mutex).Unlock(ctx)
}

func (c *etcdMutexClient) close() error {
	return errors.Join(c.sess.Close(), c.cli.Close())
}

// go-zookeeper: one connection (session) per worker, zk.NewLock(conn, path,
// world ACL).Lock / Unlock. Lock takes no context: it waits until granted.

type zkLockClient struct{ conn *zk.Conn }

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

var zkACL = zk.WorldACL(zk.PermAll)

func openZkLock(_ context.Context, addrs []string, _ config) (client, error) {
	conn, _, err := zk.Connect(addrs, zkSessionTimeout, zk.WithLogger(nopLogger{}))
	if err != nil {
		return nil, err
	}
	return &zkLockClient{conn: conn}, nil
}

func (c *zkLockClient) lock(_ context.Context, key string) (any, error) {
	l := zk.NewLock(c.conn, "/peerbench-zk/"+key, zkACL)
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return l, nil
}

func (c *zkLockClient) unlock(_ context.Context, h any) error { return h.(*zk.Lock).Unlock() }
func (c *zkLockClient) close() error                          { c.conn.Close(); return nil }

// keyName is a key both sides accept as is (no '/', ':' or spaces).
func keyName(parts ...any) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		switch v := p.(type) {
		case string:
			s[i] = v
		case int:
			s[i] = strconv.Itoa(v)
		default:
			s[i] = fmt.Sprint(v)
		}
	}
	return strings.Join(s, "-")
}
