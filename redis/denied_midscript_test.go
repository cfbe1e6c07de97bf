package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// A refusal in the middle of the acquire script: Redis scripts do not roll
// back, so a command the ACL denies after the lock's SET (here HSET of the
// holder record, for a user without +hset locking WithValue) leaves the
// lock set. The failed attempt gives it back, or the key would stay locked
// for nobody until its TTL.
func TestDeniedMidScriptGivesLockBack(t *testing.T) {
	rules := testserver.RedisLockACL("adv:")
	srv := testserver.Redis(t, testserver.WithRedisACL(
		"user default off",
		"user admin on >admin-pw ~* &* +@all",
		"user app on >app-pw "+rules,
		"user nohset on >nohset-pw "+strings.Replace(rules, " +hset", "", 1),
	))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	open := func(user string) distlock.Locker {
		t.Helper()
		l, err := distlock.Open(ctx, "redis://"+user+":"+user+"-pw@"+srv.Addr()+"/?prefix=adv:&eviction=ignore")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	denied, app := open("nohset"), open("app")
	_, err := denied.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute), distlock.WithValue("me"))
	if !errors.Is(err, distlock.ErrAccessDenied) {
		t.Fatalf("TryAcquire without +hset: %v, want ErrAccessDenied", err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: "admin", Password: "admin-pw", ContextTimeoutEnabled: true})
	defer admin.Close()
	lock := redisnode.KeysFor("adv:", "k").Lock
	// The give-back runs in the background, right after the refusal.
	if !testutil.Soon(func() bool { n, _ := admin.Exists(ctx, lock).Result(); return n == 0 }) {
		pttl, _ := admin.PTTL(ctx, lock).Result()
		t.Errorf("the refused attempt left %s set (PTTL %v): nobody holds it", lock, pttl)
	}
	ls, err := app.TryAcquire(ctx, "k")
	if err != nil {
		t.Errorf("a client with every right, after the refusal: %v", err)
	} else {
		_ = ls.Release(ctx)
	}
}
