package redis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// TestNotifierSlowServerDoesNotStall pauses the server before the pub/sub
// connection exists, so connecting it blocks for the client's ReadTimeout.
// Every Notifier call must still honour its own ctx: Subscribe does no I/O,
// a Wait returns at its deadline, and a Subscription's Close does not wait
// for the network.
func TestNotifierSlowServerDoesNotStall(t *testing.T) {
	srv := testserver.Redis(t)
	// A long ReadTimeout makes a stall stand out from the waits' deadlines.
	const readTimeout = 6 * time.Second
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, ReadTimeout: readTimeout})
	t.Cleanup(func() { _ = c.Close() })
	n := redis.NewNotifier(c, "stall:")
	t.Cleanup(func() { _ = n.Close() })
	ctx := t.Context()

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })

	// bound is generous against the 300ms deadlines, and well below readTimeout.
	const wait, bound = 300 * time.Millisecond, 2 * time.Second
	timed := func(name string, f func() error) (time.Duration, error) {
		start := time.Now()
		err := f()
		d := time.Since(start)
		t.Logf("%s: %v after %v", name, err, d.Round(time.Millisecond))
		return d, err
	}
	waitOn := func(key string) func() error {
		return func() error {
			s, err := n.Subscribe(ctx, key)
			if err != nil {
				return err
			}
			defer s.Close()
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			return s.Wait(wctx)
		}
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var slow []string
	check := func(name string, f func() error) {
		defer wg.Done()
		d, err := timed(name, f)
		mu.Lock()
		defer mu.Unlock()
		if d > bound {
			slow = append(slow, name+" took "+d.Round(time.Millisecond).String())
		}
		if name != "subscribe c" && err == nil {
			slow = append(slow, name+" returned nil on a paused server")
		}
	}
	wg.Add(1)
	go check("wait a", waitOn("a"))
	time.Sleep(50 * time.Millisecond) // let the first Wait start connecting
	wg.Add(3)
	go check("wait b", waitOn("b"))
	go check("subscribe c", func() error {
		s, err := n.Subscribe(ctx, "c")
		if err == nil {
			err = s.Close()
		}
		return err
	})
	go check("wait a again", waitOn("a"))
	wg.Wait()
	for _, s := range slow {
		t.Error(s)
	}
}

// TestNotifierSilentConnection pauses the server under an active
// subscription: writes still succeed (the kernel buffers them), as on a
// half-open connection, so only the missing reply to the health PING shows
// the connection is dead. The waiter must be woken to retry, long before
// its own deadline.
func TestNotifierSilentConnection(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	n := redis.NewNotifierHealth(c, "silent:", 200*time.Millisecond, 300*time.Millisecond)
	t.Cleanup(func() { _ = n.Close() })
	ctx := t.Context()
	s, err := n.Subscribe(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Wait(wctx); err != nil { // goes live
		t.Fatal(err)
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })
	start := time.Now()
	wctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = s.Wait(wctx)
	t.Logf("Wait on a silent connection: %v after %v", err, time.Since(start).Round(time.Millisecond))
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("a silent connection was never dropped: the waiter slept until its deadline")
	}

	// Once the server answers again, the subscription goes live again and
	// sees notices.
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	admin := newClient(t, srv.Addr())
	channel := redis.KeysFor("silent:", "a").Channel
	deadline := time.Now().Add(10 * time.Second)
	for {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := s.Wait(wctx) // first returns after resubscribing
		cancel()
		if err == nil && admin.PubSubNumSub(ctx, channel).Val()[channel] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no live subscription after Resume: %v", err)
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_ = s.Wait(dctx) // drain a wake-up from the reconnect, if any
	dcancel()
	if err := admin.Publish(ctx, channel, "").Err(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Wait(wctx); err != nil {
		t.Fatalf("notice after the connection came back: %v", err)
	}
}
