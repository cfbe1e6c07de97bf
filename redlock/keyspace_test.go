package redlock_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// Per-entity keys, each locked once on a Redlock set: on every node all
// they leave behind expires, the counters last (TTL + CounterLinger past
// their lock: phase 2 and a refresh's take-back raise them with an expiry
// too), the tombstones MaxLate.
func TestKeysLockedOnceLeaveOnlyExpiringKeys(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	l := newLocker(t, srvs)
	const keys, ttl = 2000, 10 * time.Second
	testutil.LockEachOnce(t, l, keys, ttl)
	for i, s := range srvs {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		n, persistent, longest := testutil.RedisKeysLeft(t, c)
		_ = c.Close()
		t.Logf("node %d: %d keys left, %d without expiry, the longest to expire in %v", i, n, persistent, longest.Round(time.Second))
		if persistent > 0 || longest > ttl+redisnode.CounterLinger {
			t.Fatalf("node %d: %d keys never expire, the longest lasts %v (want at most TTL + %v)", i, persistent, longest, redisnode.CounterLinger)
		}
	}
}
