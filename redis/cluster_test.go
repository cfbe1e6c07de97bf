package redis_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/redis"
)

// startClusterNode starts a one-node Redis Cluster (cluster-enabled, all
// slots assigned) and returns its address. internal/testserver has no
// cluster mode, so this test starts the server itself, the same way.
func startClusterNode(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server not found")
		}
		t.Skip("redis-server not found")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--protected-mode", "no",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + port
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	for c.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("cluster node not ready:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(c.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if ctx.Err() != nil {
			t.Fatal("cluster state never became ok")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}

func newClusterClient(addr string) *goredis.ClusterClient {
	return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true})
}

// The backend on a Cluster client: scripts touching lock and counter
// would fail with CROSSSLOT if the hash tag were wrong.
func TestClusterConformance(t *testing.T) {
	addr := startClusterNode(t)
	admin := newClusterClient(addr)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := t.Context()
	if n, err := admin.ClusterKeySlot(ctx, "somekey").Result(); err != nil || n != 11058 {
		t.Fatalf("CLUSTER KEYSLOT somekey = %d, %v", n, err)
	}
	for _, key := range []string{"orders/42", "a}b", "}x", "{"} {
		k := redisnode.KeysFor(redis.DefaultPrefix, key)
		s1, s2, s3 := admin.ClusterKeySlot(ctx, k.Lock).Val(), admin.ClusterKeySlot(ctx, k.Counter).Val(), admin.ClusterKeySlot(ctx, k.Channel).Val()
		if s1 != s2 || s1 != s3 || int(s1) != clusterSlot(k.Lock) {
			t.Errorf("key %q: slots %d %d %d (test's own: %d)", key, s1, s2, s3, clusterSlot(k.Lock))
		}
	}
	conformance.Run(t, harness(admin, func() goredis.UniversalClient { return newClusterClient(addr) }, "cl:"))

	t.Run("WaitReplicas", func(t *testing.T) {
		c := newClusterClient(addr)
		l, err := redis.New(c, redis.WithCloseClient(true), redis.WithWaitReplicas(1, 50*time.Millisecond))
		if err != nil {
			_ = c.Close()
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := l.TryAcquire(ctx, "wait"); !errors.Is(err, redis.ErrNotReplicated) {
			t.Fatalf("WAIT for a replica a node without one: want ErrNotReplicated, got %v", err)
		}
		var cc *goredis.ClusterClient
		if !distlock.As(l, &cc) || cc != c {
			t.Fatal("As(**ClusterClient) failed")
		}
	})
}
