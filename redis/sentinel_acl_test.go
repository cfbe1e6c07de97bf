package redis_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// The Sentinel URL form of docs/security-redis.md with an ACL user
// (redis://app@sentinel/?master_name=…&addr=…&password_file=…); the user
// is added to the master and the replica here. The doc: user and
// password_file "log in to the master (the ACL user)"; a wrong password is
// ErrAccessDenied at Open; a key the ACL does not grant is ErrAccessDenied
// from the call, and a waiting Acquire returns it at once.
func TestSentinelURLWithACLUser(t *testing.T) {
	rs := testserver.NewRedisSentinel(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, s := range []*testserver.Server{rs.Master, rs.Replica} {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
		if err := c.Do(ctx, "ACL", "SETUSER", "app", "on", ">app-pw", "resetkeys", "~sen:*", "resetchannels", "&sen:*", "-@all",
			"+ping", "+evalsha", "+eval", "+subscribe", "+unsubscribe", "+publish", "+time", "+get", "+set", "+del", "+exists",
			"+incr", "+pexpire", "+pexpireat", "+pttl", "+hget", "+hset", "+hmget", "+zadd", "+zcount", "+zrange",
			"+zrangebyscore", "+zrem", "+zscore").Err(); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	sa := rs.SentinelAddrs()
	dir := t.TempDir()
	sentinelURL := func(password, prefix string) string {
		f := filepath.Join(dir, password)
		if err := os.WriteFile(f, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		q := url.Values{"master_name": {rs.Name}, "addr": {sa[1], sa[2]}, "password_file": {f}, "prefix": {prefix}, "eviction": {"ignore"}}
		return "redis://app@" + sa[0] + "/?" + q.Encode()
	}

	t.Run("right password", func(t *testing.T) {
		l, err := distlock.Open(ctx, sentinelURL("app-pw", "sen:"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls, err := l.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		start := time.Now()
		l, err := distlock.Open(ctx, sentinelURL("not-the-pw", "sen:"))
		if err == nil {
			_ = l.Close()
			t.Fatal("Open succeeded")
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("refused after %v", d)
		}
		if !errors.Is(err, distlock.ErrAccessDenied) || errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("%v: want ErrAccessDenied, not ErrUnavailable", err)
		}
	})
	t.Run("key outside the ACL", func(t *testing.T) {
		l, err := distlock.Open(ctx, sentinelURL("app-pw", "other:"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		defer acancel()
		start := time.Now()
		_, err = l.Acquire(actx, "k")
		if !errors.Is(err, distlock.ErrAccessDenied) || time.Since(start) > 2*time.Second {
			t.Errorf("Acquire after %v: %v, want ErrAccessDenied at once", time.Since(start), err)
		}
	})
}
