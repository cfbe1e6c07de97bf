package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// clusterLocker returns a Locker on its own ClusterClient, closed at the end
// of the test.
func clusterLocker(t *testing.T, addrs []string) distlock.Locker {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	l, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		_ = c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// counterOn reads the token counter on node s itself: READONLY lets a
// replica answer instead of redirecting to its master.
func counterOn(ctx context.Context, t *testing.T, s *testserver.Server, counter string) int64 {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	conn := c.Conn()
	defer conn.Close()
	if err := conn.ReadOnly(ctx).Err(); err != nil {
		t.Fatalf("READONLY on %s: %v", s.Addr(), err)
	}
	n, err := conn.Get(ctx, counter).Int64()
	if err != nil {
		t.Fatalf("GET %s on %s: %v", counter, s.Addr(), err)
	}
	return n
}

// A failover to a replica that missed the latest grants must not
// make tokens go backwards. A holds token Ta, granted by a master whose
// replica was cut off; the master dies and the lagging replica takes over;
// B then acquires the key there. Tb must be larger than Ta, so that the
// fence lets B's writes through and refuses A's, whichever comes first.
func TestFailoverToLaggingReplica(t *testing.T) {
	cl := testserver.NewRedisCluster(t, 3)
	pg := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	const key = "issue13"
	keys := redisnode.KeysFor(redis.DefaultPrefix, key)
	master, replica, err := cl.Shard(ctx, keys.Lock)
	if err != nil {
		t.Fatal(err)
	}
	if replica == nil {
		t.Fatalf("the master %s of %q has no replica", master.Addr(), key)
	}
	a := clusterLocker(t, cl.Addrs())
	grant := func(n int) { t.Helper(); grantAndRelease(t, a, key, n) }

	// Grants the replica takes, so that it has a counter: a missing one
	// would be seeded from the clock and could hide a lag.
	grant(5)
	mc := goredis.NewClient(&goredis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true})
	defer mc.Close()
	if n, err := mc.Wait(ctx, 1, 30*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica to take the first grants: %d replicas, %v", n, err)
	}
	synced := counterOn(ctx, t, master, keys.Counter)
	if got := counterOn(ctx, t, replica, keys.Counter); got != synced {
		t.Fatalf("the replica acknowledged the first grants, but its counter is %d, not %d", got, synced)
	}
	if err := cl.CutOff(ctx, replica); err != nil {
		t.Fatal(err)
	}
	// Grants the replica misses, then A's own: no WAIT, as by default.
	grant(5)
	// A long TTL: A still believes it holds the lock when it writes.
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fa := la.Fence()
	// Without a lag the failover proves nothing: any script would pass.
	if lag := counterOn(ctx, t, replica, keys.Counter); lag != synced || lag >= int64(fa.Token) {
		t.Fatalf("the replica's counter is %d, want %d (from before the cut) and below A's token %d", lag, synced, fa.Token)
	}

	if err := cl.Failover(ctx, replica); err != nil {
		t.Fatal(err)
	}
	// B is a new client: it learns the new slot map from the live nodes.
	b := clusterLocker(t, cl.Addrs())
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	lb, err := b.Acquire(bctx, key) // the promoted replica never saw A's lock
	bcancel()
	if err != nil {
		t.Fatal(err)
	}
	fb := lb.Fence()
	t.Logf("A holds token %d from the old master; B got %d from the promoted replica (its counter was %d)", fa.Token, fb.Token, synced)
	if fb.Token <= fa.Token {
		// Not Fatal: the subtests show what the guard then does.
		t.Errorf("token went backwards across the failover: B's %d is not above A's %d", fb.Token, fa.Token)
	}

	checkFence(ctx, t, pg, fa, fb)
}

// checkFence shows that the fence lets B (token fb) write and refuses A
// (fa, the deposed holder), whichever writes first.
func checkFence(ctx context.Context, t *testing.T, pg *testserver.Server, fa, fb distlock.Fence) {
	t.Helper()
	pool, err := pgxpool.New(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := fencing.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE doc (id text PRIMARY KEY, writer text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	// write is a guarded read-modify-write of document id by who.
	write := func(id, who string, f distlock.Fence) error {
		return fencing.WithGuard(ctx, pool, id, f, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO doc VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET writer = excluded.writer", id, who)
			return err
		})
	}
	check := func(t *testing.T, id, who string, f distlock.Fence, wantStale bool) {
		t.Helper()
		err := write(id, who, f)
		switch {
		case wantStale && !errors.Is(err, fencing.ErrStaleToken):
			t.Errorf("%s's write with token %d: want ErrStaleToken, got %v", who, f.Token, err)
		case !wantStale && err != nil:
			t.Errorf("%s's write with token %d: %v", who, f.Token, err)
		}
	}
	lastWriter := func(t *testing.T, id string) {
		t.Helper()
		var got string
		if err := pool.QueryRow(ctx, "SELECT writer FROM doc WHERE id = $1", id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != "B" {
			t.Errorf("document %s was last written by %s, want B", id, got)
		}
	}

	t.Run("NewHolderFirst", func(t *testing.T) {
		check(t, "doc1", "B", fb, false)
		check(t, "doc1", "A", fa, true)
		lastWriter(t, "doc1")
	})
	t.Run("StaleHolderFirst", func(t *testing.T) {
		// A's first write precedes every write of B: nothing can refuse it.
		check(t, "doc2", "A", fa, false)
		check(t, "doc2", "B", fb, false)
		check(t, "doc2", "A", fa, true)
		lastWriter(t, "doc2")
	})
}

// grantAndRelease takes and gives back key n times on l, so that a replica
// has grants (and a token counter) to lag behind with.
func grantAndRelease(t *testing.T, l distlock.Locker, key string, n int) {
	t.Helper()
	for range n {
		ls, err := l.TryAcquire(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}
