package all_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all"
)

// refusedAddr returns a loopback address with nothing listening.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// tarpit accepts connections and never answers, until the test ends.
func tarpit(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// Every scheme's Open checks the server: nothing listening, or a server
// that accepts and never answers, fails with ErrUnavailable naming the
// address within the dial timeout (5 s by default), never a hang, and with
// a context that has far longer.
func TestOpenUnavailable(t *testing.T) {
	// a holds three addresses, all refused or all tarpits: Redlock refuses
	// a server named twice.
	urls := map[string]func(a []string) string{
		"redis":    func(a []string) string { return "redis://" + a[0] },
		"rediss":   func(a []string) string { return "rediss://" + a[0] },
		"redlock":  func(a []string) string { return "redlock://" + strings.Join(a, ",") },
		"etcd":     func(a []string) string { return "etcd://" + a[0] + "/" },
		"zk":       func(a []string) string { return "zk://" + a[0] + "/locks" },
		"postgres": func(a []string) string { return "postgres://app@" + a[0] + "/app" },
	}
	for scheme, mk := range urls {
		for _, server := range []string{"refused", "tarpit"} {
			t.Run(scheme+"/"+server, func(t *testing.T) {
				t.Parallel()
				var addrs []string
				for len(addrs) < 3 {
					a := refusedAddr(t)
					if server == "tarpit" {
						a = tarpit(t)
					}
					if !slices.Contains(addrs, a) { // a closed port can come back
						addrs = append(addrs, a)
					}
				}
				addr := addrs[0]
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				began := time.Now()
				l, err := distlock.Open(ctx, mk(addrs))
				took := time.Since(began)
				if err == nil {
					l.Close()
					t.Fatalf("Open(%s) succeeded against a %s port", mk(addrs), server)
				}
				if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
					t.Fatalf("Open(%s): want ErrUnavailable naming %s, got %v", mk(addrs), addr, err)
				}
				// 5 s dial timeout, plus slack for a loaded machine.
				if took > 7*time.Second {
					t.Fatalf("Open(%s) took %v", mk(addrs), took)
				}
				t.Logf("%v after %v", err, took.Round(time.Millisecond))
			})
		}
	}
}

// Malformed URLs are ErrInvalidURL, before any connection is tried.
func TestOpenMalformed(t *testing.T) {
	for _, u := range []string{
		"redis://", "redis://:6379", "redis://127.0.0.1:99999", "redis://127.0.0.1:port",
		"redlock://", "redlock://127.0.0.1", "etcd://", "zk://",
		"nosuch://127.0.0.1:1", "://x",
	} {
		_, err := distlock.Open(t.Context(), u)
		if !errors.Is(err, distlock.ErrInvalidURL) {
			t.Errorf("Open(%q): want ErrInvalidURL, got %v", u, err)
		}
	}
}

// A backend's option is refused by another backend's URL: the one mix the
// compiler cannot see (misplaced_test.go shows the ones it does).
func TestOptionScope(t *testing.T) {
	if _, err := distlock.Open(t.Context(), "mem://", redisPrefix()); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("mem:// with a redis option: want ErrInvalidOption, got %v", err)
	}
}
