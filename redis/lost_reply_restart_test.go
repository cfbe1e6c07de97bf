package redis_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// dropConn is a net.Conn whose next reply, once armed by a script call
// written on it, is read off the socket (so the server has run the script)
// and then thrown away with the connection: the client sees io.EOF, the
// way it sees a connection reset after the server has executed the
// command. Unlike a go-redis hook, this happens below go-redis's own
// retry loop.
type dropConn struct {
	net.Conn
	armed  *atomic.Bool
	poison atomic.Bool
}

func (c *dropConn) Write(p []byte) (int, error) {
	if (bytes.Contains(bytes.ToLower(p), []byte("evalsha")) || bytes.Contains(bytes.ToLower(p), []byte("*5\r\n$4\r\neval"))) &&
		c.armed.CompareAndSwap(true, false) {
		c.poison.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *dropConn) Read(p []byte) (int, error) {
	if c.poison.Load() {
		_, _ = c.Conn.Read(p) // the server ran the script and answered
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// An acquire whose reply is lost to a connection reset is resent by go-redis
// itself (MaxRetries) with the same owner value, below any hook. The resent
// attempt must find its own lock and take it (the script is idempotent per
// owner), not report "held" and leave the key stranded for the TTL.
func TestLostReplyRetriedByClientDoesNotStrandKey(t *testing.T) {
	srv := testserver.Redis(t)
	const key, ttl = "lr-lost-reply", 10 * time.Second
	var armed atomic.Bool
	var d net.Dialer
	c := goredis.NewClient(&goredis.Options{
		Addr: srv.Addr(), ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &dropConn{Conn: cn, armed: &armed}, nil
		},
	})
	a, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srv.Addr())
	loadScripts(t, b, key)

	armed.Store(true)
	held, aerr := a.TryAcquire(t.Context(), key, distlock.WithTTL(ttl))
	if armed.Load() {
		t.Fatalf("the reply was not lost (err %v)", aerr)
	}
	if aerr == nil {
		// The retry found this attempt's own lock and handed it over: a
		// real lease, which frees the key when released.
		if err := held.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	lostAt := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	ls, err := b.Acquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		hint := ""
		if errors.Is(aerr, distlock.ErrNotAcquired) {
			hint = " (the lost attempt was reported as \"held by someone else\", so it was never given back)"
		}
		t.Fatalf("the key is stranded %v after a lost reply (TTL %v)%s: %v", time.Since(lostAt).Round(time.Millisecond), ttl, hint, err)
	}
	_ = ls.Release(t.Context())
}

// Tokens stay increasing after a restart from an older snapshot, FLUSHALL
// and SCRIPT FLUSH, since the token is max(counter+1, the server clock).
func TestTokensAfterSnapshotRestartAndFlush(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := t.Context()
	const key = "lr-single-snapshot"
	l := newLocker(t, srv.Addr())
	admin := newClient(t, srv.Addr())
	var last distlock.Token
	grant := func(when string) {
		t.Helper()
		ls, err := l.TryAcquire(ctx, key, distlock.WithTTL(time.Second))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if ls.Token() <= last {
			t.Fatalf("%s: token %d not above %d", when, ls.Token(), last)
		}
		last = ls.Token()
		_ = ls.Release(ctx)
	}
	grant("first")
	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		grant("after the snapshot")
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	grant("after restarting from the snapshot")
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	grant("after FLUSHALL")
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	grant("after SCRIPT FLUSH")
}
