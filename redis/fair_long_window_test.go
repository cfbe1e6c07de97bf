package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// A queue whose Lockers chose a long window (5s) to tolerate a slow head:
// the head's attempt after the release is held up 700ms in the network,
// and a newcomer arrives 300ms after the release. Within the head's 5s
// window the newcomer must queue behind it, whoever released the lock; a
// release by a Locker WithoutFairQueue must not shrink the waiters' own
// window to the default 250ms and let the newcomer overtake.
func TestSlowHeadKeepsLongWindowWhoeverReleases(t *testing.T) {
	const window = 5 * time.Second
	for _, tc := range []struct {
		name string
		opts []distlock.Option
	}{
		{"fair-releaser", []distlock.Option{redis.WithFairQueue(window)}},
		{"racing-releaser", []distlock.Option{redis.WithoutFairQueue()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testserver.Redis(t)
			ctx := t.Context()
			key := "longwin"
			px := testutil.NewDelayProxy(t, srv.Addr(), 700*time.Millisecond)
			c := goredis.NewClient(&goredis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
			head, err := redis.New(c, redis.WithCloseClient(true), redis.WithFairQueue(window))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = head.Close() })
			loadScripts(t, head, "longwin-warm")
			holder := newLocker(t, srv.Addr(), tc.opts...)
			ls, err := holder.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			order := make(chan string, 2)
			acquire := func(who string, l distlock.Locker) {
				actx, cancel := context.WithTimeout(ctx, 15*time.Second)
				defer cancel()
				g, err := l.Acquire(actx, key, distlock.WithTTL(time.Minute))
				if err != nil {
					t.Errorf("%s: %v", who, err)
					order <- "error"
					return
				}
				order <- who
				time.Sleep(10 * time.Millisecond)
				_ = g.Release(ctx)
			}
			go acquire("head", head)
			queued(t, srv, key, 1)
			time.Sleep(200 * time.Millisecond) // the head is in its Wait
			px.HoldNext(1, []byte(key+"}"))    // its attempt after the release
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			go acquire("newcomer", newLocker(t, srv.Addr(), redis.WithFairQueue(window)))
			first, second := <-order, <-order
			if first != "head" {
				t.Fatalf("granted %s then %s: the slow head (window %v, its attempt 700ms late) was overtaken by a newcomer 300ms after a %s release", first, second, window, tc.name)
			}
		})
	}
}
