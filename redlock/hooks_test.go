package redlock_test

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redlock"
)

// Public API: a renewal batch goes to every node (redlock/batch.go); with
// words shared across the nodes' goroutines a key-rewriting hook on each
// node's client rewrote them 1..3 times (and raced), the real locks on most
// nodes were never extended and every auto-renewing lease was lost with all
// nodes healthy. Each node gets words of its own.
func TestRedlockBatchHook(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx := t.Context()
	mk := func() distlock.Locker {
		cs := clients(t, srvs, true)
		for _, c := range cs {
			c.(*goredis.Client).AddHook(testutil.KeyPrefixHook{Prefix: "tenant1:"})
		}
		l, err := redlock.New(cs, redlock.WithCloseClients(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	for _, c := range clients(t, srvs, false) { // scripts cached: no EVAL fallback anywhere
		redisnode.AcquireOn(ctx, c, redisnode.KeysFor("w:", "w"), "w", time.Second, "")
		redisnode.ExtendOn(ctx, c, redisnode.KeysFor("w:", "w"), "w", time.Second, 1, "w", "", 0)
		redisnode.RaiseTokenOn(ctx, c, redisnode.KeysFor("w:", "w"), "w", 1, time.Second, "")
	}
	l1 := mk()
	var leases []*distlock.Lease
	for i := range 4 {
		ls, err := l1.TryAcquire(ctx, fmt.Sprint("job-", i), distlock.WithTTL(900*time.Millisecond), distlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, ls)
	}
	time.Sleep(2500 * time.Millisecond)
	for i, c := range clients(t, srvs, false) {
		t.Logf("node %d lock keys: %q", i, c.Keys(ctx, "*job-0*").Val())
	}
	for i, ls := range leases {
		if ls.Err() != nil {
			t.Errorf("lease %d (auto-renewed, all nodes up) lost: %v", i, ls.Err())
		}
	}
	l2 := mk()
	for i, ls := range leases {
		if ls.Err() != nil {
			continue
		}
		if b, err := l2.TryAcquire(ctx, fmt.Sprint("job-", i), distlock.WithTTL(time.Minute)); err == nil {
			t.Errorf("job-%d: lease %d still held by l1, yet l2 acquired it with token %d", i, ls.Token(), b.Token())
		}
	}
}
