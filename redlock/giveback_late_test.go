package redlock_test

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redlock"
)

// One give-back must cover attempts still on their way to every node: with
// TTL-long tombstones, acquires delayed past the TTL land on all nodes
// after the give-back (see redis's TestGiveBackCoversALateAcquire).
func TestGiveBackCoversLateAcquires(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	const ttl = time.Second
	const delay = 1500 * time.Millisecond
	src, err := os.ReadFile("../internal/redisnode/lua/acquire.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	sha := []byte(hex.EncodeToString(sum[:]))
	var cs []goredis.UniversalClient
	var pxs []*testutil.DelayProxy
	for _, s := range srvs {
		px := testutil.NewDelayProxy(t, s.Addr(), delay)
		px.Match = sha
		pxs = append(pxs, px)
		cs = append(cs, goredis.NewClient(&goredis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, DialTimeout: time.Second}))
	}
	l, err := redlock.New(cs, redlock.WithCloseClients(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := t.Context()
	ls, err := l.TryAcquire(ctx, "warm", distlock.WithTTL(ttl)) // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(ctx)

	for _, px := range pxs {
		px.Slow.Store(true)
	}
	t0 := time.Now()
	_, err = l.TryAcquire(ctx, "k", distlock.WithTTL(ttl))
	if err == nil {
		t.Fatal("the delayed attempt succeeded")
	}
	t.Logf("attempt failed after %v: %v", time.Since(t0), err)
	time.Sleep(300 * time.Millisecond) // the give-back has run
	for _, px := range pxs {
		px.Slow.Store(false)
	}

	other := newLocker(t, srvs)
	var firstHeld, lastHeld time.Duration
	for time.Since(t0) < delay+ttl+time.Second {
		o, err := other.TryAcquire(ctx, "k", distlock.WithTTL(ttl))
		if err == nil {
			_ = o.Release(ctx)
		} else {
			if firstHeld == 0 {
				firstHeld = time.Since(t0)
			}
			lastHeld = time.Since(t0)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if firstHeld != 0 {
		t.Fatalf("after the give-back, the abandoned attempt held %q from %v to %v after it began (%v; TTL %v, acquires delayed %v)",
			"k", firstHeld, lastHeld, lastHeld-firstHeld, ttl, delay)
	}
}
