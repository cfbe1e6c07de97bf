package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

const (
	short    = 300 * time.Millisecond // deadline of a request that must not get through
	generous = 10 * time.Second       // liveness bound for a request that must get through
)

// isTimeout reports whether err is a deadline expiry in any of the clients' ways of saying so.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) ||
		pgconn.Timeout(err)
}

// callWithin runs fn for clients without deadlines and reports whether it
// returned within d, and its error if it did.
func callWithin(d time.Duration, fn func() error) (finished bool, err error) {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	select {
	case err := <-ch:
		return true, err
	case <-time.After(d):
		return false, nil
	}
}

func ctxWithin(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestRedis(t *testing.T) {
	s := Redis(t, WithRedisAppendFsync("always"))
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()

	require.NoError(t, c.Ping(ctxWithin(t, generous)).Err())
	require.NoError(t, c.Set(ctxWithin(t, generous), "k", "before kill", 0).Err())
	require.Equal(t, "before kill", c.Get(ctxWithin(t, generous), "k").Val())

	require.NoError(t, s.Pause())
	err := c.Ping(ctxWithin(t, short)).Err()
	require.Error(t, err, "PING succeeded on a paused server")
	require.True(t, isTimeout(err), "want a timeout, got %v", err)
	require.NoError(t, s.Resume())
	require.NoError(t, c.Ping(ctxWithin(t, generous)).Err())

	port, pid := s.Port(), s.PID()
	require.NoError(t, s.Kill())
	require.NoError(t, s.Kill(), "Kill is idempotent")
	require.Zero(t, s.PID())
	require.Error(t, c.Ping(ctxWithin(t, generous)).Err(), "PING succeeded on a killed server")

	require.NoError(t, s.Restart(ctxWithin(t, generous)))
	require.Equal(t, port, s.Port())
	require.NotEqual(t, pid, s.PID())
	got, err := c.Get(ctxWithin(t, generous), "k").Result()
	require.NoError(t, err)
	require.Equal(t, "before kill", got, "appendfsync always keeps an acknowledged write across SIGKILL")
}

func TestRedisN(t *testing.T) {
	ss := RedisN(t, 3)
	require.Len(t, ss, 3)
	ports := map[int]bool{}
	for i, s := range ss {
		ports[s.Port()] = true
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer c.Close()
		require.NoError(t, c.Set(ctxWithin(t, generous), "k", fmt.Sprint(i), 0).Err())
	}
	require.Len(t, ports, 3, "servers share a port")
	for i, s := range ss {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer c.Close()
		require.Equal(t, fmt.Sprint(i), c.Get(ctxWithin(t, generous), "k").Val(), "servers are not independent")
	}

	// Without persistence a graceful restart comes back empty.
	s := ss[0]
	require.NoError(t, s.Stop())
	require.Zero(t, s.PID())
	require.NoError(t, s.Restart(ctxWithin(t, generous)))
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	require.ErrorIs(t, c.Get(ctxWithin(t, generous), "k").Err(), redis.Nil)
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func zkConnect(t *testing.T, servers ...string) *zk.Conn {
	t.Helper()
	// A session long enough that a short pause neither expires it nor makes the client drop the connection.
	c, _, err := zk.Connect(servers, 4*time.Second, zk.WithLogger(nopLogger{}))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func zkGet(c *zk.Conn, path string) (string, error) {
	b, _, err := c.Get(path)
	return string(b), err
}

func TestZooKeeper(t *testing.T) {
	s := ZooKeeper(t)
	cl := &Cluster{Members: []*Server{s}}
	mode, err := cl.Mode(0)
	require.NoError(t, err)
	require.Equal(t, "standalone", mode)

	c := zkConnect(t, s.Addr())
	_, err = c.Create("/a", []byte("before kill"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	got, err := zkGet(c, "/a")
	require.NoError(t, err)
	require.Equal(t, "before kill", got)

	require.NoError(t, s.Pause())
	finished, err := callWithin(short, func() error { _, err := zkGet(c, "/a"); return err })
	require.False(t, finished && err == nil, "Get succeeded on a paused server")
	require.NoError(t, s.Resume())
	finished, err = callWithin(generous, func() error { _, err := zkGet(c, "/a"); return err })
	require.True(t, finished, "Get hangs after Resume")
	require.NoError(t, err)

	require.NoError(t, s.Kill())
	finished, err = callWithin(time.Second, func() error { _, err := zkGet(c, "/a"); return err })
	require.False(t, finished && err == nil, "Get succeeded on a killed server")

	require.NoError(t, s.Restart(ctxWithin(t, 30*time.Second)))
	c2 := zkConnect(t, s.Addr())
	finished, err = callWithin(generous, func() error {
		got, err = zkGet(c2, "/a")
		return err
	})
	require.True(t, finished, "Get hangs after Restart")
	require.NoError(t, err)
	require.Equal(t, "before kill", got, "ZooKeeper lost an acknowledged write")
}

func TestZooKeeperEnsemble(t *testing.T) {
	cl := ZooKeeperEnsemble(t, 3)
	modes := map[string]int{}
	leader := -1
	for i := range cl.Members {
		mode, err := cl.Mode(i)
		require.NoError(t, err)
		modes[mode]++
		if mode == "leader" {
			leader = i
		}
	}
	require.Equal(t, map[string]int{"leader": 1, "follower": 2}, modes)
	l, err := cl.Leader()
	require.NoError(t, err)
	require.Equal(t, leader, l)

	c := zkConnect(t, cl.Endpoints()...)
	_, err = c.Create("/a", []byte("v"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	// Kill the leader: a follower takes over, and the old leader rejoins as a follower.
	require.NoError(t, cl.Members[leader].Kill())
	require.Eventually(t, func() bool { l, err := cl.Leader(); return err == nil && l != leader }, generous, 50*time.Millisecond)
	require.NoError(t, cl.Members[leader].Restart(ctxWithin(t, 30*time.Second)))
	mode, err := cl.Mode(leader)
	require.NoError(t, err)
	require.Equal(t, "follower", mode)
	c2 := zkConnect(t, cl.Members[leader].Addr())
	finished, err := callWithin(generous, func() error {
		if _, err := c2.Sync("/a"); err != nil {
			return err
		}
		got, err := zkGet(c2, "/a")
		if err == nil && got != "v" {
			err = fmt.Errorf("got %q", got)
		}
		return err
	})
	require.True(t, finished, "Get hangs on the restarted member")
	require.NoError(t, err)
}

func TestPostgres(t *testing.T) {
	s := Postgres(t)
	require.Equal(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port()), s.DSN())
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		c, err := pgx.Connect(ctx, s.DSN())
		if err == nil {
			t.Cleanup(func() { c.Close(context.Background()) })
		}
		return c, err
	}
	selectOne := func(ctx context.Context, c *pgx.Conn) error {
		var one int
		return c.QueryRow(ctx, "SELECT 1").Scan(&one)
	}

	c, err := connect(ctxWithin(t, generous))
	require.NoError(t, err)
	require.NoError(t, selectOne(ctxWithin(t, generous), c))
	_, err = c.Exec(ctxWithin(t, generous), "CREATE TABLE t (v text); INSERT INTO t VALUES ('committed')")
	require.NoError(t, err)

	require.NoError(t, s.Pause())
	err = selectOne(ctxWithin(t, short), c)
	require.Error(t, err, "SELECT succeeded on a paused server")
	require.True(t, isTimeout(err), "want a timeout, got %v", err)
	require.NoError(t, s.Resume())
	c, err = connect(ctxWithin(t, generous)) // pgx closes a connection whose query timed out
	require.NoError(t, err)
	require.NoError(t, selectOne(ctxWithin(t, generous), c))

	require.NoError(t, s.Kill())
	require.Error(t, selectOne(ctxWithin(t, time.Second), c), "SELECT succeeded on a killed server")
	_, err = connect(ctxWithin(t, time.Second))
	require.Error(t, err, "connected to a killed server")

	require.NoError(t, s.Restart(ctxWithin(t, generous)))
	c, err = connect(ctxWithin(t, generous))
	require.NoError(t, err)
	var v string
	require.NoError(t, c.QueryRow(ctxWithin(t, generous), "SELECT v FROM t").Scan(&v))
	require.Equal(t, "committed", v, "PostgreSQL lost a committed row")
}
