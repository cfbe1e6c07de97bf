package all_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// A waiting Acquire rides out a server that is down for a while: it retries
// with its back-off until ctx ends instead of failing on the first refused
// connection, and gets the lock once the server is back. TryAcquire, one
// attempt, fails at once with an error matching ErrUnavailable.
func TestAcquireWaitsOutUnavailableServer(t *testing.T) {
	for _, c := range []struct {
		scheme string
		start  func(t *testing.T) *testserver.Server
	}{
		{"redis", func(t *testing.T) *testserver.Server { return testserver.Redis(t) }},
		{"etcd", func(t *testing.T) *testserver.Server { return testserver.Etcd(t) }},
		{"zk", func(t *testing.T) *testserver.Server { return testserver.ZooKeeper(t) }},
		{"postgres", func(t *testing.T) *testserver.Server { return testserver.Postgres(t) }},
	} {
		t.Run(c.scheme, func(t *testing.T) {
			srv := c.start(t)
			url := c.scheme + "://" + srv.Addr()
			switch c.scheme {
			case "postgres":
				url = srv.DSN()
				migrate(t, url)
			case "redis":
			default:
				url += "/"
			}
			l, err := distlock.Open(t.Context(), url, distlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
			tctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			_, err = l.TryAcquire(tctx, "k")
			cancel()
			if c.scheme != "etcd" && !errors.Is(err, distlock.ErrUnavailable) {
				t.Errorf("TryAcquire with the server down: want ErrUnavailable, got %v", err)
			} else if err == nil {
				t.Fatal("TryAcquire with the server down succeeded")
			}
			restarted := make(chan error, 1)
			go func() {
				time.Sleep(time.Second)
				restarted <- srv.Restart(context.Background())
			}()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			ls, err := l.Acquire(ctx, "k")
			if rerr := <-restarted; rerr != nil {
				t.Fatal(rerr)
			}
			if err != nil {
				t.Fatalf("Acquire across a server restart: %v", err)
			}
			_ = ls.Release(ctx)
		})
	}
}
