package redlock_test

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redlock"
)

func TestInvalid(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	cs := clients(t, srvs, false)
	for _, tc := range []struct {
		name    string
		clients []goredis.UniversalClient
		opts    []distlock.Option
	}{
		{"none", nil, nil},
		{"one", cs[:1], nil},
		{"even", []goredis.UniversalClient{cs[0], cs[1], cs[2], cs[0]}, nil},
		{"nil client", []goredis.UniversalClient{cs[0], nil, cs[2]}, nil},
		{"brace prefix", cs, []distlock.Option{redlock.WithKeyPrefix("a{b")}},
		{"zero node timeout", cs, []distlock.Option{redlock.WithNodeTimeout(0)}},
		{"huge node timeout", cs, []distlock.Option{redlock.WithNodeTimeout(time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := redlock.New(tc.clients, tc.opts...)
			if err == nil {
				_ = l.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, distlock.ErrInvalidOption) || !errors.Is(err, distlock.ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalidOption", err)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	hosts := srvs[0].Addr() + "," + srvs[1].Addr() + "," + srvs[2].Addr()
	ctx := t.Context()

	l, err := distlock.Open(ctx, "redlock://"+hosts+"?prefix=open:&node_timeout=80ms&ttl=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g := l.Guarantees()
	if g.Backend != "redlock" || g.FailuresTolerated != 1 || !g.ClockDependent || !g.RestartLosesLocks || g.Wait != distlock.WaitNotify {
		t.Fatalf("guarantees %+v", g)
	}
	ls, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// A quorum at least (the third may still be in flight, or cancelled).
	if held := lockExists(t, clients(t, srvs, false), "open:", "k"); len(held) < 2 {
		t.Fatalf("lock on nodes %v, want a quorum under the URL's prefix", held)
	}
	var cs []goredis.UniversalClient
	if !distlock.As(l, &cs) || len(cs) != 3 {
		t.Fatalf("As: got %d clients", len(cs))
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []string{
		"redlock://" + hosts + "?bogus=1",
		"redlock://" + hosts + "?node_timeout=abc",
		"redlock://" + srvs[0].Addr() + "," + srvs[1].Addr(),
		"redlock://" + hosts + "/notadb",
		"redlock://" + hosts + ",nohostport",
	} {
		l, err := distlock.Open(ctx, bad)
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) succeeded", bad)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalid) {
			t.Errorf("Open(%q): %v does not match ErrInvalid", bad, err)
		}
	}
}
