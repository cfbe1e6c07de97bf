package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redlock"
)

// A server listed twice counts twice toward the quorum: over A,A,B with B
// paused, A alone granted the lock, and Guarantees reported one tolerated
// failure when there was none. The same server must be refused however it
// is spelled (names resolved, Redis's default port applied).
func TestOpenRefusesDuplicateNodes(t *testing.T) {
	srvs := testserver.RedisN(t, 2)
	a, b := srvs[0], srvs[1]
	p := a.Port()
	for _, tc := range []struct{ hosts, first, second string }{
		{a.Addr() + "," + a.Addr() + "," + b.Addr(), a.Addr(), a.Addr()},
		{fmt.Sprintf("localhost:%d,127.0.0.1:%d,%s", p, p, b.Addr()), fmt.Sprintf("localhost:%d", p), a.Addr()},
		{fmt.Sprintf("%s,%s,LocalHost:%d", a.Addr(), b.Addr(), p), a.Addr(), fmt.Sprintf("LocalHost:%d", p)},
	} {
		t.Run(tc.hosts, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			// The password must not show in the error.
			u := "redlock://user:s3cret@" + tc.hosts
			l, err := distlock.Open(ctx, u)
			if err == nil {
				_ = l.Close()
				t.Fatalf("Open(%s) succeeded: one server would count twice toward the quorum", tc.hosts)
			}
			if !errors.Is(err, distlock.ErrInvalidURL) {
				t.Fatalf("Open(%s): want ErrInvalidURL, got %v", tc.hosts, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.first) || !strings.Contains(msg, tc.second) {
				t.Errorf("error %q does not name the pair %s and %s", msg, tc.first, tc.second)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error %q shows the URL's password", msg)
			}
		})
	}
}

// The danger itself: with A listed twice and B paused, no lock may be
// granted, because only one server of two answers. Before duplicates were
// refused, Open succeeded and A alone granted it.
func TestDuplicateNodeGrantsNoLockAlone(t *testing.T) {
	srvs := testserver.RedisN(t, 2)
	a, b := srvs[0], srvs[1]
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := distlock.Open(ctx, "redlock://"+a.Addr()+","+a.Addr()+","+b.Addr())
	if errors.Is(err, distlock.ErrInvalidURL) {
		return
	}
	if err != nil {
		t.Fatalf("Open: want ErrInvalidURL, got %v", err)
	}
	defer l.Close()
	if err := b.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Resume() }()
	ls, err := l.TryAcquire(ctx, "dup")
	if err == nil {
		t.Errorf("lock granted by %s alone (listed twice) while %s, the only other server, was paused; "+
			"Guarantees: %d failure(s) tolerated", a.Addr(), b.Addr(), l.Guarantees().FailuresTolerated)
		_ = ls.Release(ctx)
		return
	}
	t.Errorf("Open accepted a server listed twice (TryAcquire then failed: %v)", err)
}

// New cannot resolve what a client dials unless it is a *goredis.Client:
// there it compares Options().Addr; any client given twice is refused.
func TestNewRefusesDuplicateClients(t *testing.T) {
	srvs := testserver.RedisN(t, 2)
	a, b := srvs[0], srvs[1]
	p := a.Port()
	mk := func(addr string) goredis.UniversalClient {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	same := mk(a.Addr())
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"s": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	for _, tc := range []struct {
		name    string
		clients []goredis.UniversalClient
	}{
		{"two clients, one address", []goredis.UniversalClient{mk(a.Addr()), mk(a.Addr()), mk(b.Addr())}},
		{"one client twice", []goredis.UniversalClient{same, mk(b.Addr()), same}},
		{"localhost and 127.0.0.1", []goredis.UniversalClient{mk(fmt.Sprintf("localhost:%d", p)), mk(b.Addr()), mk(a.Addr())}},
		{"IPv4-mapped IPv6", []goredis.UniversalClient{mk(fmt.Sprintf("[::ffff:127.0.0.1]:%d", p)), mk(a.Addr()), mk(b.Addr())}},
		{"default port", []goredis.UniversalClient{mk("127.0.0.1"), mk(b.Addr()), mk("localhost:6379")}},
		{"default address", []goredis.UniversalClient{mk(""), mk(b.Addr()), mk("127.0.0.1:6379")}},
		{"one ring twice", []goredis.UniversalClient{ring, mk(a.Addr()), ring}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, f := range map[string]func() (func() error, error){
				"New": func() (func() error, error) {
					l, err := redlock.New(tc.clients)
					if l != nil {
						return l.Close, err
					}
					return nil, err
				},
				"NewBackend": func() (func() error, error) {
					be, err := redlock.NewBackend(tc.clients)
					if be != nil {
						return be.Close, err
					}
					return nil, err
				},
			} {
				closeFn, err := f()
				if err == nil {
					_ = closeFn()
					t.Errorf("%s succeeded: one server would count twice toward the quorum", name)
					continue
				}
				if !errors.Is(err, distlock.ErrInvalidOption) {
					t.Errorf("%s: want ErrInvalidOption, got %v", name, err)
				}
				t.Logf("%s: %v", name, err)
			}
		})
	}
}

// Distinct servers open, whatever the spelling.
func TestDistinctNodesAccepted(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	p := func(i int) int { return srvs[i].Port() }
	for _, hosts := range []string{
		fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", p(0), p(1), p(2)),
		fmt.Sprintf("localhost:%d,127.0.0.1:%d,LOCALHOST:%d", p(0), p(1), p(2)),
	} {
		t.Run(hosts, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			l, err := distlock.Open(ctx, "redlock://"+hosts)
			if err != nil {
				t.Fatalf("Open(%s): %v", hosts, err)
			}
			defer l.Close()
			ls, err := l.TryAcquire(ctx, "distinct")
			if err != nil {
				t.Fatal(err)
			}
			_ = ls.Release(ctx)
		})
	}
	var cs []goredis.UniversalClient
	// (A URL's host list cannot hold a bracketed IPv6 literal: url.Parse refuses it.)
	for _, addr := range []string{fmt.Sprintf("localhost:%d", p(0)), fmt.Sprintf("[::ffff:127.0.0.1]:%d", p(1)), fmt.Sprintf("127.0.0.1:%d", p(2))} {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	l, err := redlock.New(cs)
	if err != nil {
		t.Fatalf("New over three servers: %v", err)
	}
	defer l.Close()
	ls, err := l.TryAcquire(t.Context(), "distinct")
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(t.Context())
}

// A name that does not resolve is not judged (Open's PING reports it), and
// the check does not hang on it.
func TestDuplicateCheckUnresolvable(t *testing.T) {
	srvs := testserver.RedisN(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	u := "redlock://nosuch.invalid:6379," + srvs[0].Addr() + "," + srvs[1].Addr() + "?dial_timeout=500ms"
	began := time.Now()
	l, err := distlock.Open(ctx, u)
	t.Logf("Open(%s) after %v: %v", u, time.Since(began).Round(time.Millisecond), err)
	if err != nil {
		t.Fatalf("a majority answers, want Open to succeed: %v", err)
	}
	_ = l.Close()
	// Spelled the same twice, it is the same server whether it resolves or not.
	u = "redlock://nosuch.invalid:6379,NoSuch.invalid:6379," + srvs[0].Addr() + "?dial_timeout=500ms"
	l, err = distlock.Open(ctx, u)
	if err == nil {
		_ = l.Close()
		t.Fatalf("Open(%s) succeeded", u)
	}
	if !errors.Is(err, distlock.ErrInvalidURL) {
		t.Fatalf("Open(%s): want ErrInvalidURL, got %v", u, err)
	}
}

// Clients that reach their servers through a Dialer of their own (a tunnel
// or proxy per node) name them apart by Addr, which the Dialer is given:
// New takes them, and refuses them when they share one Addr (it cannot see
// what a Dialer makes of it).
func TestNewAcceptsServersBehindDialersByAddr(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	byName := map[string]string{}
	for i, s := range srvs {
		byName[fmt.Sprintf("node-%d:6379", i)] = s.Addr()
	}
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, byName[addr])
	}
	clientsAt := func(addrs ...string) []goredis.UniversalClient {
		var cs []goredis.UniversalClient
		for _, a := range addrs {
			c := goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true, DialTimeout: time.Second, Dialer: dial})
			t.Cleanup(func() { _ = c.Close() })
			cs = append(cs, c)
		}
		return cs
	}
	l, err := redlock.New(clientsAt("node-0:6379", "node-1:6379", "node-2:6379"))
	if err != nil {
		t.Fatalf("three servers named apart refused: %v", err)
	}
	ls, err := l.TryAcquire(t.Context(), "behind-dialers")
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(t.Context())
	_ = l.Close()
	if _, err := redlock.New(clientsAt("node-0:6379", "node-0:6379", "node-2:6379")); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("one Addr twice behind a Dialer: %v, want ErrInvalidOption", err)
	}
}
