package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all" // every backend for distlock.Open
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/postgres"
)

// TTL is the lease TTL of every scenario: short, so that a pause of a few
// seconds outlasts it on every backend (etcd sends ceil(TTL)+1s = 2s;
// ZooKeeper's session timeout is set to zkSession).
const TTL = time.Second

// lateReadTimeout is the read timeout of the single-Redis workers' client:
// below the late-request fault's hold (TTL/4 to TTL/2), so go-redis resends
// a held request on a new connection, which lands first. (Redlock's node
// timeout, TTL/10, ends a held node call before any resend.)
const lateReadTimeout = TTL / 5

// zkSession is ZooKeeper's session timeout, which is its real TTL.
const zkSession = 1500 * time.Millisecond

// zkMaxServerPause bounds a ZooKeeper server's pause within the tolerance:
// a session last heard of a ping interval (zkSession/3) before a leader's
// stall must not be older than zkSession when the leader wakes, less a
// margin of two ticks (100 ms each in the test servers).
const zkMaxServerPause = 2*zkSession/3 - 200*time.Millisecond

// Backends lists the backend specs the harness knows. Those whose scheme is
// not registered (package not linked) are left out by Available.
func Backends() []BackendSpec {
	return []BackendSpec{
		{Name: "redis", Scheme: "redis", Start: startRedis("")},
		{Name: "redis-aof", Scheme: "redis", Start: startRedis("always")},
		{Name: "redlock", Scheme: "redlock", Start: startRedlock(3)},
		{Name: "redlock5", Scheme: "redlock", Start: startRedlock(5)},
		{Name: "etcd", Scheme: "etcd", Start: startEtcd(1)},
		{Name: "etcd3", Scheme: "etcd", Start: startEtcd(3)},
		{Name: "zookeeper", Scheme: "zk", Start: startZK(1)},
		{Name: "zookeeper3", Scheme: "zk", Start: startZK(3)},
		{Name: "postgres", Scheme: "postgres", Start: startPostgres},
	}
}

// Available reports whether spec's backend is registered with distlock.
func Available(spec BackendSpec) bool {
	for _, s := range distlock.Schemes() {
		if s == spec.Scheme {
			return true
		}
	}
	return false
}

func startRedis(fsync string) func(t testing.TB) *Target {
	return func(t testing.TB) *Target {
		var opts []testserver.Option
		name := "redis"
		if fsync != "" {
			opts = append(opts, testserver.WithRedisAppendFsync(fsync))
			name = "redis-aof"
		}
		s := testserver.Redis(t, opts...)
		tg := &Target{Backend: name, Servers: []*testserver.Server{s}, TTL: TTL, Renew: TTL / 3, proxyable: true, resends: true,
			Linger: 500 * time.Millisecond,
			URL: func(a []string) string {
				return "redis://" + a[0] + "?dial_timeout=500ms&read_timeout=" + lateReadTimeout.String()
			}}
		tg.Guarantees = guarantees(t, tg)
		return tg
	}
}

func startRedlock(n int) func(t testing.TB) *Target {
	return func(t testing.TB) *Target {
		ss := testserver.RedisN(t, n)
		tg := &Target{Backend: fmt.Sprintf("redlock%d", n), Servers: ss, TTL: TTL, Renew: TTL / 3, proxyable: true,
			resends: true, Redlock: true, repairs: true, Linger: 500 * time.Millisecond,
			URL: func(a []string) string { return "redlock://" + strings.Join(a, ",") + "?dial_timeout=500ms" }}
		if n == 3 {
			tg.Backend = "redlock"
		}
		tg.Guarantees = guarantees(t, tg)
		return tg
	}
}

func startEtcd(n int) func(t testing.TB) *Target {
	return func(t testing.TB) *Target {
		tg := &Target{Backend: "etcd", TTL: TTL, Renew: TTL / 3, proxyable: n == 1,
			Election: 3 * time.Second, Linger: 1500 * time.Millisecond,
			URL: func(a []string) string { return "etcd://" + strings.Join(a, ",") + "/?dial_timeout=2s" }}
		if n == 1 {
			tg.Servers = []*testserver.Server{testserver.Etcd(t)}
		} else {
			tg.Cluster = testserver.EtcdCluster(t, n)
			tg.Servers = tg.Cluster.Members
			tg.Backend = fmt.Sprintf("etcd%d", n)
		}
		tg.Guarantees = guarantees(t, tg)
		return tg
	}
}

func startZK(n int) func(t testing.TB) *Target {
	return func(t testing.TB) *Target {
		tg := &Target{Backend: "zookeeper", TTL: TTL, Renew: TTL / 3, proxyable: n == 1,
			Election: zkSession + 2*time.Second, Linger: zkSession,
			URL: func(a []string) string {
				return "zk://" + strings.Join(a, ",") + "/faults?session_timeout=" + zkSession.String()
			}}
		if n == 1 {
			tg.Servers = []*testserver.Server{testserver.ZooKeeper(t)}
		} else {
			tg.Cluster = testserver.ZooKeeperEnsemble(t, n)
			tg.Servers = tg.Cluster.Members
			tg.Backend = fmt.Sprintf("zookeeper%d", n)
		}
		tg.Guarantees = guarantees(t, tg)
		return tg
	}
}

// startPostgres starts the lock server of the postgres backend (not the
// harness's own database) and creates its lock table.
func startPostgres(t testing.TB) *Target {
	s := testserver.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	tg := &Target{Backend: "postgres", Servers: []*testserver.Server{s}, TTL: TTL, Renew: TTL / 3, proxyable: true,
		Linger: 500 * time.Millisecond,
		URL: func(a []string) string {
			return "postgres://postgres@" + a[0] + "/postgres?sslmode=disable&connect_timeout=1"
		}}
	tg.Guarantees = guarantees(t, tg)
	return tg
}

// guarantees opens the target once in this process to read what the
// backend declares for it.
func guarantees(t testing.TB, tg *Target) distlock.Guarantees {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := distlock.Open(ctx, tg.URL(tg.addrs()))
	if err != nil {
		t.Fatalf("%s: open: %v", tg.Backend, err)
	}
	defer l.Close()
	return l.Guarantees()
}

// startZKClamped starts one ZooKeeper server whose maxSessionTimeout
// (granted) is below the session timeout the clients ask for (asked): the
// server expires sessions on the granted timeout, and the backend's loss
// notice must follow it.
func startZKClamped(granted, asked time.Duration) func(t testing.TB) *Target {
	return func(t testing.TB) *Target {
		tg := &Target{Backend: "zookeeper-clamped", TTL: TTL, Renew: TTL / 3, proxyable: true,
			Election: granted + 2*time.Second, Linger: granted,
			URL: func(a []string) string {
				return "zk://" + strings.Join(a, ",") + "/faults?session_timeout=" + asked.String()
			}}
		tg.Servers = []*testserver.Server{testserver.ZooKeeper(t, testserver.WithZKMaxSessionTimeout(granted))}
		tg.Guarantees = guarantees(t, tg)
		return tg
	}
}
