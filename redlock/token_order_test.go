package redlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redlock"
)

// (c) tokens across resent acquires (phase 1 and phase 2 replies lost below
// go-redis's retry), FLUSHALL, SAVE + restart from the snapshot, and
// restarts without data, with two lockers alternating.
func TestTokenOrderAcrossResendsAndRestarts(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const key, ttl = "audit2-tokens", 300 * time.Millisecond
	nt := redlock.WithNodeTimeout(100 * time.Millisecond)
	drops := []*atomic.Bool{{}, {}, {}}
	aL, hs := hooked(t, srvs, drops, nt)
	bL := newLocker(t, srvs, nt)
	admins := clients(t, srvs, false)
	var last distlock.Token
	n := 0
	grant := func(l distlock.Locker, when string) {
		t.Helper()
		n++
		ls, err := l.Acquire(ctx, key, distlock.WithTTL(ttl))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if ls.Token() <= last {
			t.Fatalf("grant %d %s: token %d not above %d", n, when, ls.Token(), last)
		}
		last = ls.Token()
		_ = ls.Release(ctx)
	}
	for i := range 30 {
		drops[i%3].Store(true) // phase 1 or phase 2 resent on one node
		if i%5 == 0 {
			drops[(i+1)%3].Store(true)
		}
		grant(aL, "resent")
		grant(bL, "after resent")
	}
	_ = admins[0].Save(ctx).Err()
	for range 20 {
		grant(bL, "after save")
	}
	hs[1].cut.Store(true)
	for range 10 {
		grant(aL, "node 1 cut")
	}
	hs[1].cut.Store(false)
	_ = srvs[0].Kill()
	_ = srvs[0].Restart(ctx) // from the older snapshot, early
	_ = admins[2].FlushAll(ctx).Err()
	grant(aL, "node 0 restarted from snapshot, node 2 flushed")
	_ = srvs[1].Kill()
	grant(bL, "majority {0 from snapshot, 2 flushed}")
	_ = srvs[1].Restart(ctx)
	for i := range 10 {
		grant(aL, fmt.Sprint("after all ", i))
	}
}
