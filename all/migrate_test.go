package all_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
)

// A key space moves from Redis to etcd, then to ZooKeeper, as the README
// tells an operator to: raise the fence epoch with each move. Every move's
// first guarded write is accepted although the new backend's tokens are far
// below Redis's (µs since 1970) or restart from small revisions and zxids;
// the old deployment's holder, still holding its lease and writing after
// the move (a paused process that wakes), is refused; no fence row is
// deleted. Without the raise, the move locks the data out.
func TestMoveBackendsWithFenceEpoch(t *testing.T) {
	ctx := t.Context()
	pg := testserver.Postgres(t)
	pool, err := pgxpool.New(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := fencing.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE counters (name text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const key = "counter"
	increment := func(f distlock.Fence) error {
		return fencing.WithGuard(ctx, pool, key, f, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO counters VALUES ($1, 1) ON CONFLICT (name) DO UPDATE SET n = counters.n + 1`, key)
			return err
		})
	}
	open := func(url string) distlock.Locker {
		l, err := distlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	acquire := func(l distlock.Locker) *distlock.Lease {
		ls, err := l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}

	// Epoch 0 on Redis: the app writes, and a holder of it stays around.
	onRedis := open("redis://" + testserver.Redis(t).Addr())
	for range 3 {
		ls := acquire(onRedis)
		if err := increment(ls.Fence()); err != nil {
			t.Fatal(err)
		}
		_ = ls.Release(ctx)
	}
	pausedRedis := acquire(onRedis)
	if err := increment(pausedRedis.Fence()); err != nil {
		t.Fatal(err)
	}

	etcdURL := "etcd://" + testserver.Etcd(t).Addr()
	// Moving without raising the epoch locks the data out: etcd's revisions
	// are far below the Redis token the fence holds.
	unraised := acquire(open(etcdURL))
	if err := increment(unraised.Fence()); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("etcd at the old epoch: %v, want ErrStaleToken (the lock-out epochs exist for)", err)
	}
	_ = unraised.Release(ctx)

	// The operator raises the epoch with the move.
	onEtcd := open(etcdURL + "?fence_epoch=1")
	first := acquire(onEtcd)
	if f := first.Fence(); f.Epoch != 1 || f.Token >= pausedRedis.Fence().Token {
		t.Fatalf("etcd fence %+v: want epoch 1 and a token below Redis's %d", f, pausedRedis.Fence().Token)
	}
	if err := increment(first.Fence()); err != nil {
		t.Fatalf("the first guarded write after the move: %v", err)
	}
	if err := increment(pausedRedis.Fence()); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the old deployment's holder, writing after the move: %v, want ErrStaleToken", err)
	}
	pausedEtcd := first // keeps its lease into the next move

	// Epoch 2 on ZooKeeper.
	onZK := open("zk://" + testserver.ZooKeeper(t).Addr() + "/moved?fence_epoch=2")
	zl := acquire(onZK)
	if err := increment(zl.Fence()); err != nil {
		t.Fatalf("the first guarded write on ZooKeeper: %v", err)
	}
	for _, stale := range []*distlock.Lease{pausedEtcd, pausedRedis} {
		if err := increment(stale.Fence()); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("a holder of epoch %d writing after the move to epoch 2: %v, want ErrStaleToken", stale.Fence().Epoch, err)
		}
	}
	_ = zl.Release(ctx)

	var rows, n int64
	var epoch int64
	if err := pool.QueryRow(ctx, `SELECT count(*), max(epoch) FROM distlock_fence WHERE resource = $1`, key).Scan(&rows, &epoch); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT n FROM counters WHERE name = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || epoch != 2 || n != 6 {
		t.Fatalf("fence rows %d at epoch %d, counter %d: want the one row at epoch 2 and the 6 accepted writes", rows, epoch, n)
	}
}
