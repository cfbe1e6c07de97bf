package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redlock"
)

// With a majority of nodes refusing connections, a waiting Acquire should
// retry (the servers are out of reach) until ctx ends, and report
// ErrUnavailable; and it should get the lock once they come back.
func TestWaitRidesOutNoQuorum(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	l := newLocker(t, srvs)
	for _, s := range srvs[:2] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		time.Sleep(time.Second)
		for _, s := range srvs[:2] {
			_ = s.Restart(context.Background())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	start := time.Now()
	ls, err := l.Acquire(ctx, "no-quorum")
	t.Logf("after %v: err=%v ErrNoQuorum=%v ErrUnavailable=%v", time.Since(start).Round(time.Millisecond), err,
		errors.Is(err, redlock.ErrNoQuorum), errors.Is(err, distlock.ErrUnavailable))
	if err != nil {
		t.Errorf("waiting Acquire gave up on servers out of reach instead of retrying: %v", err)
		return
	}
	_ = ls.Release(ctx)
}
