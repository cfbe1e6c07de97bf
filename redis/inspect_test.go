package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// The value lasts as long as the lock, through refreshes one by one and in
// batches, and is read in one round trip (one script call, nothing else).
func TestInspectValueThroughRefreshes(t *testing.T) {
	srv := testserver.Redis(t)
	calls := &testutil.RedisCalls{}
	c := newClient(t, srv.Addr())
	c.AddHook(calls)
	l, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	if h, err := l.Inspect(ctx, "free"); err != nil || h != (distlock.Holder{}) {
		t.Fatalf("Inspect of a free key = %+v, %v", h, err)
	}
	const ttl = 300 * time.Millisecond
	ls, err := l.TryAcquire(ctx, "refreshed", distlock.WithTTL(ttl), distlock.WithValue("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // 4 × 150ms: well past the first TTL
		time.Sleep(ttl / 2)
		if err := ls.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testutil.MustHold(t, l, ls, "host-a", "after refreshes past the first TTL")

	// One round trip each (the script is loaded already).
	singles, pipes := calls.Singles.Load(), calls.Pipelines.Load()
	const n = 10
	for range n {
		testutil.MustHold(t, l, ls, "host-a", "counted")
	}
	if singles, pipes = calls.Singles.Load()-singles, calls.Pipelines.Load()-pipes; singles != n || pipes != 0 {
		t.Errorf("%d Inspect calls took %d commands and %d pipelines, want one command each", n, singles, pipes)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, redisnode.KeysFor(redis.DefaultPrefix, "refreshed").Holder).Val(); n != 0 {
		t.Error("the release left the holder record")
	}

	// Renewals due together go as one pipeline (RefreshBatch): the records
	// of the locks taken with a value are extended with them.
	b, err := redis.NewBackend(newClient(t, srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var batch []driver.Refresh
	for i, v := range []string{"one", "", "three"} {
		req := driver.Request{Key: "batch-" + v, TTL: ttl, Owner: "owner-" + v, Value: v}
		g, err := b.TryLock(ctx, req)
		if err != nil {
			t.Fatal(i, err)
		}
		g.Key, g.Owner, g.TTL = req.Key, req.Owner, req.TTL
		batch = append(batch, driver.Refresh{Grant: g, TTL: time.Minute})
	}
	if err := b.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // the TTL the locks were taken with has passed
	for _, r := range batch {
		if r.Err != nil {
			t.Fatal(r.Grant.Key, r.Err)
		}
		h, err := b.Inspect(ctx, r.Grant.Key)
		want := r.Grant.Key[len("batch-"):]
		if err != nil || !h.Held || h.Token != r.Grant.Token || h.Value != want || h.TTL < 30*time.Second {
			t.Errorf("%s after a batch refresh to 1m: Inspect = %+v, %v; want token %d, value %q", r.Grant.Key, h, err, r.Grant.Token, want)
		}
	}
}

// A value left on the server by a holder whose lock ended without a
// release is never reported for the next holder, which gave none.
func TestInspectIgnoresEarlierHolderValue(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	l := newLocker(t, srv.Addr())
	ctx := t.Context()
	_, err := l.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute), distlock.WithValue("first"))
	if err != nil {
		t.Fatal(err)
	}
	k := redisnode.KeysFor(redis.DefaultPrefix, "k")
	if err := admin.Del(ctx, k.Lock).Err(); err != nil { // ended on the server (an early expiry)
		t.Fatal(err)
	}
	second, err := l.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if v := admin.HGet(ctx, k.Holder, "value").Val(); v != "first" {
		t.Fatalf("the first holder's record is %q; the test needs it still there", v)
	}
	testutil.MustHold(t, l, second, "", "the holder after one whose lock expired with a value")
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h, err := l.Inspect(ctx, "k"); err != nil || h != (distlock.Holder{}) {
		t.Fatalf("Inspect after the release = %+v, %v; want free", h, err)
	}
}

// An unreachable server is ErrUnavailable, as for the other calls.
func TestInspectServerDown(t *testing.T) {
	srv := testserver.Redis(t)
	l := newLocker(t, srv.Addr())
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	h, err := l.Inspect(ctx, "k")
	if !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Inspect on a killed server = %+v, %v; want ErrUnavailable", h, err)
	}
}
