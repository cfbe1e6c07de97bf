package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distlock/distlock/internal/testserver"
)

// The etcd servers the tests start (package testserver) behave as the
// tests assume: pause, kill, restart, and a cluster that re-elects. These
// live here, not in testserver, so that the library module needs no etcd
// client.

const (
	short    = 300 * time.Millisecond // deadline of a request that must not get through
	generous = 10 * time.Second       // liveness bound for a request that must get through
)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) ||
		status.Code(err) == codes.DeadlineExceeded ||
		(errors.As(err, &ne) && ne.Timeout())
}

func ctxWithin(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func etcdClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func etcdGet(ctx context.Context, c *clientv3.Client, key string) (string, error) {
	resp, err := c.Get(ctx, key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("%s not found", key)
	}
	return string(resp.Kvs[0].Value), nil
}

func TestServerPauseKillRestart(t *testing.T) {
	s := testserver.Etcd(t)
	c := etcdClient(t, s.Addr())

	_, err := c.Put(ctxWithin(t, generous), "k", "before kill")
	require.NoError(t, err)
	got, err := etcdGet(ctxWithin(t, generous), c, "k")
	require.NoError(t, err)
	require.Equal(t, "before kill", got)

	require.NoError(t, s.Pause())
	_, err = c.Get(ctxWithin(t, short), "k")
	require.Error(t, err, "Get succeeded on a paused server")
	require.True(t, isTimeout(err), "want a timeout, got %v", err)
	require.NoError(t, s.Resume())
	_, err = etcdGet(ctxWithin(t, generous), c, "k")
	require.NoError(t, err)

	require.NoError(t, s.Kill())
	_, err = c.Get(ctxWithin(t, time.Second), "k")
	require.Error(t, err, "Get succeeded on a killed server")

	require.NoError(t, s.Restart(ctxWithin(t, generous)))
	got, err = etcdGet(ctxWithin(t, generous), c, "k")
	require.NoError(t, err)
	require.Equal(t, "before kill", got, "etcd lost an acknowledged write")
}

func TestServerCluster(t *testing.T) {
	cl := testserver.EtcdCluster(t, 3)
	require.Len(t, cl.Endpoints(), 3)
	leaders := map[uint64]bool{}
	for _, ep := range cl.Endpoints() {
		st, err := etcdClient(t, ep).Status(ctxWithin(t, generous), ep)
		require.NoError(t, err, "member %s", ep)
		leaders[st.Leader] = true
	}
	require.Len(t, leaders, 1, "members disagree about the leader")

	_, err := etcdClient(t, cl.Members[0].Addr()).Put(ctxWithin(t, generous), "k", "v1")
	require.NoError(t, err)
	got, err := etcdGet(ctxWithin(t, generous), etcdClient(t, cl.Members[2].Addr()), "k")
	require.NoError(t, err)
	require.Equal(t, "v1", got)

	// Kill the leader: the others elect a new one, and the old leader rejoins after a restart.
	old, err := cl.Leader()
	require.NoError(t, err)
	require.NoError(t, cl.Members[old].Kill())
	require.Eventually(t, func() bool { l, err := cl.Leader(); return err == nil && l != old }, generous, 50*time.Millisecond)
	_, err = etcdClient(t, cl.Members[(old+1)%3].Addr()).Put(ctxWithin(t, generous), "k", "v2")
	require.NoError(t, err)
	require.NoError(t, cl.Members[old].Restart(ctxWithin(t, generous)))
	got, err = etcdGet(ctxWithin(t, generous), etcdClient(t, cl.Members[old].Addr()), "k")
	require.NoError(t, err)
	require.Equal(t, "v2", got)

	// Kill all, then bring the cluster back at once.
	for _, m := range cl.Members {
		require.NoError(t, m.Kill())
	}
	require.NoError(t, cl.Restart(ctxWithin(t, 30*time.Second)))
	got, err = etcdGet(ctxWithin(t, generous), etcdClient(t, cl.Endpoints()...), "k")
	require.NoError(t, err)
	require.Equal(t, "v2", got)
}
