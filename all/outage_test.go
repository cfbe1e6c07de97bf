package all_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// A waiting Acquire should ride out a short outage (the new retry of
// transient errors): stop the server, start Acquire, restart after 1.5s.
func TestAcquireRidesOutOutage(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  func(t *testing.T) *testserver.Server
	}{
		{"redis", func(t *testing.T) *testserver.Server { return testserver.Redis(t) }},
		{"etcd", func(t *testing.T) *testserver.Server { return testserver.Etcd(t) }},
		{"zk", func(t *testing.T) *testserver.Server { return testserver.ZooKeeper(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.srv(t)
			l, err := distlock.Open(context.Background(), tc.name+"://"+s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			go func() { time.Sleep(1500 * time.Millisecond); _ = s.Restart(context.Background()) }()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			start := time.Now()
			ls, err := l.Acquire(ctx, "outage")
			t.Logf("%s: after %v err=%v unavailable=%v", tc.name, time.Since(start).Round(time.Millisecond), err, errors.Is(err, distlock.ErrUnavailable))
			if err != nil {
				t.Errorf("waiting Acquire did not ride out a 1.5s outage: %v", err)
				return
			}
			_ = ls.Release(ctx)
		})
	}
}
