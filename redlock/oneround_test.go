package redlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// scriptCalls returns how many EVALSHA a node has run since its last
// CONFIG RESETSTAT.
func scriptCalls(t *testing.T, c goredis.UniversalClient) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// counterAndRecord reads key's token counter and holder record on a node.
func counterAndRecord(t *testing.T, c goredis.UniversalClient, key string) (counter distlock.Token, rec redisnode.NodeLock) {
	t.Helper()
	k := redisnode.KeysFor(redis.DefaultPrefix, key)
	rec, err := redisnode.InspectOn(context.Background(), c, k)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Counter, rec
}

// TestOneRoundWhenNodesAgree: nodes whose counters moved together and whose
// clocks read the same millisecond hand out the same token, and the acquire
// then skips phase 2 (one script per node, not two); every grant's token is
// still above the last, and a majority's counters and records carry it.
// (An attempt that straggles a millisecond takes phase 2; of 30, at least
// one must have run in one round.)
func TestOneRoundWhenNodesAgree(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs)
	ctx := t.Context()
	const key = "oneround"
	oneRound := 0
	var last distlock.Token
	for range 30 {
		for _, a := range admins {
			if err := a.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		ls, err := l.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		for _, a := range admins {
			calls = max(calls, scriptCalls(t, a))
		}
		if calls == 1 {
			oneRound++
		}
		if ls.Token() <= last {
			t.Fatalf("token %d not above the last grant's %d", ls.Token(), last)
		}
		last = ls.Token()
		carrying := 0
		for _, a := range admins {
			if c, rec := counterAndRecord(t, a, key); c >= ls.Token() && rec.Recorded && rec.Token == ls.Token() {
				carrying++
			}
		}
		if carrying < 2 {
			t.Fatalf("token %d: counter and record at it on %d nodes, want a majority", ls.Token(), carrying)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of 30 acquires in one round", oneRound)
	if oneRound == 0 {
		t.Fatal("no acquire skipped phase 2")
	}
}

// TestOddNodeBroughtToLeaseToken: two nodes whose counters are ahead of the
// clock agree on a token and grant it in one round; the third node, which
// took the lock with a token of its own, is brought to the lease's token
// (counter and record) right after the grant, and Inspect reports the
// lease's token.
func TestOddNodeBroughtToLeaseToken(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs)
	ctx := t.Context()
	const key = "oddnode"
	k := redisnode.KeysFor(redis.DefaultPrefix, key)
	ahead := time.Now().Add(time.Hour).UnixMicro()
	for _, a := range admins[1:] {
		if err := a.Set(ctx, k.Counter, ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	if want := distlock.Token(ahead + 1); ls.Token() != want {
		t.Fatalf("token %d, want the agreeing nodes' %d", ls.Token(), want)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, rec := counterAndRecord(t, admins[0], key)
		if c == ls.Token() && rec.Recorded && rec.Token == ls.Token() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 0: counter %d, record %+v; want both at the lease's token %d", c, rec, ls.Token())
		}
		time.Sleep(10 * time.Millisecond)
	}
	h, err := l.Inspect(ctx, key)
	if err != nil || !h.Held || h.Token != ls.Token() {
		t.Fatalf("Inspect = %+v, %v; want held with token %d", h, err, ls.Token())
	}
}

// TestInspectPrefersTheMajorityToken: a node that took the lock late with a
// larger token of its own (a straggler after the grant, before a refresh
// rewrote its record) does not make Inspect report a token the lease does
// not have.
func TestInspectPrefersTheMajorityToken(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs)
	ctx := t.Context()
	const key = "straggler"
	ls, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	k := redisnode.KeysFor(redis.DefaultPrefix, key)
	if err := admins[2].HSet(ctx, k.Holder, "token", strconv.FormatInt(int64(ls.Token())+1000, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	for range 20 { // Inspect reads whichever majority answers first
		h, err := l.Inspect(ctx, key)
		if err != nil || !h.Held || h.Token != ls.Token() {
			t.Fatalf("Inspect = %+v, %v; want held with the lease's token %d", h, err, ls.Token())
		}
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, rec := counterAndRecord(t, admins[2], key); !rec.Recorded || rec.Token != ls.Token() {
		t.Fatalf("after a refresh, node 2's record %+v; want the lease's token %d", rec, ls.Token())
	}
}
