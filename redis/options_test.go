package redis_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

func TestEvictionCheck(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := t.Context()
	for _, tc := range []struct {
		policy  string
		mode    redis.EvictionCheck
		refused bool
		warn    string
	}{
		{"noeviction", redis.EvictionRefuse, false, ""},
		{"noeviction", redis.EvictionWarn, false, ""},
		{"allkeys-lru", redis.EvictionWarn, false, "token counter"},
		{"allkeys-lfu", redis.EvictionRefuse, true, ""},
		{"allkeys-random", redis.EvictionIgnore, false, ""},
		{"volatile-lru", redis.EvictionRefuse, false, "held locks"},
	} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", tc.policy).Err(); err != nil {
			t.Fatal(err)
		}
		var logs testutil.SyncBuffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		l, err := redis.New(c, redis.WithCloseClient(true), redis.WithEvictionCheck(tc.mode), distlock.WithLogger(logger))
		if tc.refused {
			if !errors.Is(err, redis.ErrEvictionPolicy) {
				t.Errorf("%s, %v: want ErrEvictionPolicy, got %v", tc.policy, tc.mode, err)
			}
			_ = c.Close()
			continue
		}
		if err != nil {
			t.Fatalf("%s, %v: %v", tc.policy, tc.mode, err)
		}
		_ = l.Close()
		switch out := logs.String(); {
		case tc.warn == "" && out != "":
			t.Errorf("%s, %v: unexpected log %q", tc.policy, tc.mode, out)
		case tc.warn != "" && !strings.Contains(out, tc.warn):
			t.Errorf("%s, %v: log %q does not warn about %q", tc.policy, tc.mode, out, tc.warn)
		}
	}
	if p, err := redis.EvictionPolicy(ctx, admin); err != nil || p != "volatile-lru" {
		t.Errorf("EvictionPolicy = %q, %v", p, err)
	}
	// A server that cannot be asked is refused in refuse mode.
	srv.Kill()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	if _, err := redis.New(c, redis.WithEvictionCheck(redis.EvictionRefuse)); !errors.Is(err, redis.ErrEvictionPolicy) {
		t.Errorf("refuse mode on a down server: want ErrEvictionPolicy, got %v", err)
	}
}

func TestOptions(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for name, opt := range map[string]distlock.Option{
		"brace prefix":      redis.WithKeyPrefix("a{b"),
		"negative replicas": redis.WithWaitReplicas(-1, time.Second),
		"zero wait timeout": redis.WithWaitReplicas(1, 0),
		"bad eviction mode": redis.WithEvictionCheck(redis.EvictionCheck(42)),
	} {
		if _, err := redis.New(c, opt, redis.WithEvictionCheck(redis.EvictionIgnore)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: want ErrInvalidOption, got %v", name, err)
		}
	}
	if _, err := redis.New(nil); !errors.Is(err, distlock.ErrInvalid) {
		t.Errorf("nil client: want ErrInvalid, got %v", err)
	}
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := redis.New(ring, redis.WithWaitReplicas(1, time.Second), redis.WithEvictionCheck(redis.EvictionIgnore)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("WAIT on a Ring: want ErrInvalidOption, got %v", err)
	}
	if _, err := redis.New(c, redis.WithEvictionCheck(redis.EvictionIgnore), distlock.WithTTL(-time.Second)); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Errorf("bad TTL: want ErrInvalidTTL, got %v", err)
	}
}

func TestOpen(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct{ url, want string }{
		{"redis://127.0.0.1:1/?bogus=1", "bogus"},
		{"redis://127.0.0.1:1/?prefix=a{b", "brace"},
		{"redis://127.0.0.1:1/?eviction=sometimes", "eviction"},
		{"redis://127.0.0.1:1/?wait_replicas=x", "wait_replicas"},
		{"redis://127.0.0.1:1/?wait_replicas=1&wait_timeout=-1s", "timeout"},
		{"redis://127.0.0.1:1/?dial_timeout=soon", "dial_timeout"},
		{"redis://127.0.0.1:1/notadb", "db"},
		// TLS, credentials and Sentinel: refused before dialling.
		{"rediss://127.0.0.1:1/?cert_file=/c.pem", "key_file"},
		{"redis://127.0.0.1:1/?ca_file=/no/such/ca.pem", "ca_file"},
		{"redis://u:pw@127.0.0.1:1/?password_file=/run/p", "password_file"},
		{"redis://127.0.0.1:1/?tls=maybe", "tls"},
		{"redis://127.0.0.1:1/?master_name=", "master_name"},
		{"redis://127.0.0.1:1/?master_name=m&route_randomly=true", "route_randomly"},
		{"redis://127.0.0.1:1/?master_name=m&route_by_latency=true", "route_by_latency"},
		{"redis://127.0.0.1:1/?master_name=m&replica_only=true", "replica_only"},
		{"redis://127.0.0.1:1/?master_name=m&password=pw", "password"},
		{"redis://127.0.0.1:1/?master_name=m&addr=nohostport", "addr"},
	} {
		l, err := distlock.Open(ctx, tc.url)
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v; want ErrInvalid mentioning %q", tc.url, err, tc.want)
		}
	}

	srv := testserver.Redis(t)
	l, err := distlock.Open(ctx, "redis://"+srv.Addr()+"/2?prefix=app:&ttl=5s&dial_timeout=1s&eviction=refuse")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var uc goredis.UniversalClient
	var cl *goredis.Client
	if !distlock.As(l, &uc) || !distlock.As(l, &cl) || cl.Options().DB != 2 || !cl.Options().ContextTimeoutEnabled {
		t.Fatalf("As: client %v", cl)
	}
	var cc *goredis.ClusterClient
	if distlock.As(l, &cc) {
		t.Fatal("As gave a ClusterClient for a plain client")
	}
	ls, err := l.TryAcquire(ctx, "opened")
	if err != nil {
		t.Fatal(err)
	}
	if ls.TTL() != 5*time.Second {
		t.Fatalf("ttl=5s gave %v", ls.TTL())
	}
	db2 := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DB: 2})
	defer db2.Close()
	if n := db2.Exists(ctx, "app:{opened}").Val(); n != 1 {
		t.Fatal("lock key app:{opened} not in db 2")
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := l.Guarantees()
	if g.Backend != "redis" || g.Wait != distlock.WaitNotify || !g.RestartLosesLocks || g.FailuresTolerated != 0 ||
		!strings.Contains(g.TokenSource, "TIME") {
		t.Fatalf("Guarantees = %+v", g)
	}
}
