package redisnode_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

func readerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("redisnode.(*Notifier).read("))
}

func TestNotifier(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	before := readerGoroutines()
	n := redisnode.NewNotifier(c, "n:", nil)
	channel := redisnode.KeysFor("n:", "k").Channel
	wait := func(s driver.Subscription, d time.Duration) error {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return s.Wait(wctx)
	}

	s1, err := n.Subscribe(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if readerGoroutines() != before {
		t.Fatal("Subscribe started the reader before any Wait")
	}
	// The first Wait subscribes and returns once the subscription is live.
	if err := wait(s1, 5*time.Second); err != nil {
		t.Fatalf("first Wait: %v", err)
	}
	if m := admin.PubSubNumSub(ctx, channel).Val(); m[channel] != 1 {
		t.Fatalf("after the first Wait the channel has %d subscribers", m[channel])
	}
	// Nothing published: Wait blocks until its context ends.
	if err := wait(s1, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with no notice: %v", err)
	}
	// A notice that arrives before Wait is kept for it, for every
	// subscription, including one made after the channel went live.
	s2, _ := n.Subscribe(ctx, "k")
	other, _ := n.Subscribe(ctx, "other")
	if err := admin.Publish(ctx, channel, "").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	for i, s := range []driver.Subscription{s1, s2} {
		if err := wait(s, 50*time.Millisecond); err != nil {
			t.Fatalf("subscription %d missed a notice sent before its Wait: %v", i+1, err)
		}
	}
	if err := wait(other, 50*time.Millisecond); err != nil {
		t.Fatalf("first Wait on another key: %v", err) // its subscription goes live
	}
	if err := wait(other, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a notice on k woke a waiter on another key: %v", err)
	}

	// A dropped connection wakes waiters; they subscribe again and see
	// later notices.
	errc := make(chan error, 1)
	go func() { errc <- wait(s1, 10*time.Second) }()
	time.Sleep(100 * time.Millisecond)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Wait across a dropped connection: %v", err)
	}
	if err := wait(s1, 5*time.Second); err != nil { // resubscribes
		t.Fatalf("Wait after reconnect: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	_ = wait(s1, 10*time.Millisecond) // drain a notice from the reconnect, if any
	if err := admin.Publish(ctx, channel, "").Err(); err != nil {
		t.Fatal(err)
	}
	if err := wait(s1, 5*time.Second); err != nil {
		t.Fatalf("notice after reconnect: %v", err)
	}

	// The last Close of a channel unsubscribes it.
	for _, s := range []driver.Subscription{s1, s2, other} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for admin.PubSubNumSub(ctx, channel).Val()[channel] != 0 {
		if time.Now().After(deadline) {
			t.Fatal("channel still subscribed after every subscription closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s3, _ := n.Subscribe(ctx, "k")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s3.Wait(ctx); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if _, err := n.Subscribe(ctx, "k"); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	// Close returns once the reader called wg.Done, which it does in a
	// deferred call, with read still on its stack: give it a moment.
	deadline = time.Now().Add(time.Second)
	for readerGoroutines() != before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := readerGoroutines(); got != before {
		t.Fatalf("%d reader goroutines left after Close", got-before)
	}
}

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
	n := redisnode.NewNotifier(c, "stall:", nil)
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
	n := redisnode.NewNotifierHealth(c, "silent:", 200*time.Millisecond, 300*time.Millisecond)
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
	channel := redisnode.KeysFor("silent:", "a").Channel
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
