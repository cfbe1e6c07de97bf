package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// Public API: after a restart / SCRIPT FLUSH, the first TryAcquire's EVAL
// fallback must not resend hook-rewritten words (it did: a second Locker
// then acquired the same key while the first lease was held).
func TestTwoHolders(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	c.AddHook(testutil.KeyPrefixHook{Prefix: "tenant1:"})
	t.Cleanup(func() { _ = c.Close() })
	l1, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	c.ScriptFlush(ctx)
	a, err := l1.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, err := l2.TryAcquire(ctx, "job", distlock.WithTTL(time.Minute))
	if err == nil {
		t.Errorf("two holders of %q: tokens %d and %d", "job", a.Token(), b.Token())
	}
}
