package redis_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/distlock/distlock/internal/testserver"
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
		s4 := admin.ClusterKeySlot(ctx, k.Holder).Val()
		if s1 != s2 || s1 != s3 || s1 != s4 || int(s1) != clusterSlot(k.Lock) {
			t.Errorf("key %q: slots %d %d %d %d (test's own: %d)", key, s1, s2, s3, s4, clusterSlot(k.Lock))
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

// On a Redis Cluster one stalled shard must not cost the renewing leases
// whose keys live on healthy shards: a pipeline waits for every shard, so
// the backend declines batches on a sharded client and each lease is
// refreshed on its own key's master (with batched renewals, every
// healthy-shard lease was lost).
func TestStalledShardKeepsHealthyShardLeases(t *testing.T) {
	cl := testserver.NewRedisCluster(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, s := range cl.Nodes {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		// So that the healthy master keeps serving its slots whatever the
		// cluster thinks of the stalled one.
		if err := c.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	stalledMaster, _, err := cl.Shard(ctx, redisnode.KeysFor("distlock:", "probe-0").Lock)
	if err != nil {
		t.Fatal(err)
	}
	var healthy, stalled []string
	for i := 0; len(healthy) < 8 || len(stalled) < 8; i++ {
		key := fmt.Sprint("shard-", i)
		m, _, err := cl.Shard(ctx, redisnode.KeysFor("distlock:", key).Lock)
		if err != nil {
			t.Fatal(err)
		}
		if m == stalledMaster {
			if len(stalled) < 8 {
				stalled = append(stalled, key)
			}
		} else if len(healthy) < 8 {
			healthy = append(healthy, key)
		}
	}
	l := clusterLocker(t, cl.Addrs())
	const ttl = 1500 * time.Millisecond
	acquire := func(keys []string) []*distlock.Lease {
		var out []*distlock.Lease
		for _, k := range keys {
			ls, err := l.TryAcquire(ctx, k, distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ls)
		}
		return out
	}
	// The healthy shard's leases first: theirs are the earliest deadlines.
	hl := acquire(healthy)
	acquire(stalled)
	time.Sleep(300 * time.Millisecond)

	if err := stalledMaster.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // the healthy shard answers all along
	lost := 0
	for i, ls := range hl {
		if err := ls.Err(); err != nil {
			lost++
			t.Logf("healthy-shard lease %s lost: %v", healthy[i], err)
		}
	}
	if err := stalledMaster.Resume(); err != nil {
		t.Fatal(err)
	}
	if lost > 0 {
		t.Errorf("%d of %d leases on the healthy shard were lost while another shard was stalled", lost, len(hl))
	}
}
