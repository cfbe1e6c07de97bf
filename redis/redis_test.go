package redis_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// newClient returns a client whose socket I/O honours context deadlines.
func newClient(t testing.TB, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newLocker returns a Locker with its own client, closed with the Locker.
func newLocker(t testing.TB, addr string, opts ...distlock.Option) distlock.Locker {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	l, err := redis.New(c, append([]distlock.Option{redis.WithCloseClient(true)}, opts...)...)
	if err != nil {
		_ = c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// harness runs the conformance suite on client(); a forced expiry DELs the
// lock key through a separate admin client.
func harness(admin goredis.UniversalClient, client func() goredis.UniversalClient, prefix string, opts ...distlock.Option) conformance.Harness {
	return conformance.Harness{
		NewBackend: func(ctx context.Context) (driver.Backend, error) {
			c := client()
			b, err := redis.NewBackend(c, append([]distlock.Option{redis.WithKeyPrefix(prefix), redis.WithCloseClient(true)}, opts...)...)
			if err != nil {
				_ = c.Close()
			}
			return b, err
		},
		ForceExpire: func(ctx context.Context, key string) error {
			n, err := admin.Del(ctx, redisnode.KeysFor(prefix, key).Lock).Result()
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("key %q is not held", key)
			}
			return nil
		},
		TTL: 500 * time.Millisecond,
	}
}

func TestConformance(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	conformance.Run(t, harness(admin, func() goredis.UniversalClient {
		return goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	}, "conf:"))
}

// The whole suite holds with waiters that race instead of queueing, and
// with a short hand-off window.
func TestConformanceWithoutFairQueue(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	conformance.Run(t, harness(admin, func() goredis.UniversalClient {
		return goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	}, "race:", redis.WithoutFairQueue()))
}

// commandCalls returns the calls per command from INFO commandstats.
func commandCalls(t *testing.T, admin *goredis.Client) map[string]int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		// cmdstat_evalsha:calls=3,usec=...
		name, rest, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		calls[name] = n
	}
	return calls
}

func scriptCalls(c map[string]int) int { return c["evalsha"] + c["eval"] }

// A waiter on a long-held key sends nothing while it waits, and the
// release's notice, not a poll, wakes it.
func TestHandOffWithoutPolling(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	holder, waiter := newLocker(t, srv.Addr()), newLocker(t, srv.Addr())
	ctx := t.Context()
	const key = "handoff"
	ls, err := holder.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		ls  *distlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := waiter.Acquire(wctx, key, distlock.WithTTL(30*time.Second))
		got <- result{w, err}
	}()
	// Wait until the waiter's subscription is live, then give it a moment
	// for the one retry it makes once subscribed.
	// (A queued waiter listens on its own channel, the release channel's
	// name and its id.)
	channel := redisnode.KeysFor(redis.DefaultPrefix, key).Channel
	deadline := time.Now().Add(10 * time.Second)
	for {
		chans, err := admin.PubSubChannels(ctx, channel+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(chans) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never subscribed to the release channel")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	// A polling waiter would have sent several attempts by now (the
	// back-off caps at 500ms); the fallback poll waits min(PTTL, 5s).
	if n := scriptCalls(commandCalls(t, admin)); n > 1 {
		t.Fatalf("the waiter sent %d script calls in 1.5s while waiting on a held key; want at most 1", n)
	}
	released := time.Now()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		// Generous, yet shorter than the ≥3s the fallback poll would take.
		if d := time.Since(released); d > 1500*time.Millisecond {
			t.Fatalf("waiter took %v after the release: woken by its fallback poll, not the notice", d)
		}
		if r.ls.Token() <= ls.Token() {
			t.Fatalf("waiter's token %d not above the holder's %d", r.ls.Token(), ls.Token())
		}
		if err := r.ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("waiter not woken")
	}
}

func scriptSHA(t *testing.T, name string) string {
	t.Helper()
	src, err := os.ReadFile("../internal/redisnode/lua/" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

// After SCRIPT FLUSH every operation still works: EVALSHA's NOSCRIPT falls
// back to EVAL, which loads the script again.
func TestScriptFlushRecovery(t *testing.T) {
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	l := newLocker(t, srv.Addr())
	ctx := t.Context()
	shas := []string{scriptSHA(t, "acquire"), scriptSHA(t, "refresh"), scriptSHA(t, "release")}

	first, err := l.TryAcquire(ctx, "flush", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := admin.ScriptExists(ctx, shas...).Result(); err != nil || !ok[0] || !ok[1] || !ok[2] {
		t.Fatalf("scripts not cached after first use: %v %v", ok, err)
	}
	for _, step := range []string{"acquire", "refresh", "release"} {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var ls *distlock.Lease
		switch step {
		case "acquire":
			ls, err = l.TryAcquire(ctx, "flush", distlock.WithTTL(time.Minute))
			if err == nil {
				if ls.Token() <= first.Token() {
					t.Fatalf("token %d after flush not above %d", ls.Token(), first.Token())
				}
				first = ls
			}
		case "refresh":
			err = first.Refresh(ctx)
		case "release":
			err = first.Release(ctx)
		}
		if err != nil {
			t.Fatalf("%s after SCRIPT FLUSH: %v", step, err)
		}
		calls := commandCalls(t, admin)
		if calls["eval"] != 1 {
			t.Fatalf("%s after SCRIPT FLUSH: %d EVAL calls, want 1 (the NOSCRIPT fallback); stats %v", step, calls["eval"], calls)
		}
	}
}

// clusterSlot is CRC16-XMODEM mod 16384 of the key's hash tag, as Redis
// Cluster computes it; used where CLUSTER KEYSLOT is disabled.
func clusterSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func TestKeyLayoutHashTag(t *testing.T) {
	// Reference values from the Redis Cluster specification and docs.
	for key, want := range map[string]int{"somekey": 11058, "foo{hash_tag}": 2515, "{hash_tag}bar": 2515, "foo{}{bar}": 8363} {
		if got := clusterSlot(key); got != want {
			t.Fatalf("test's slot(%q) = %d, want %d", key, got, want)
		}
	}
	srv := testserver.Redis(t)
	admin := newClient(t, srv.Addr())
	ctx := t.Context()
	slot := func(key string) int {
		n, err := admin.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			// Redis 7.0 refuses CLUSTER KEYSLOT without cluster-enabled.
			return clusterSlot(key)
		}
		return int(n)
	}
	keys := []string{"orders/42", "a}b", "}x", "{x}", "%7D", "a%7Db", "naïve", "a{b}c", "}", "{", "%"}
	seen := map[string]string{}
	for _, key := range keys {
		k := redisnode.KeysFor(redis.DefaultPrefix, key)
		if s1, s2, s3, s4 := slot(k.Lock), slot(k.Counter), slot(k.Channel), slot(k.Holder); s1 != s2 || s1 != s3 || s1 != s4 {
			t.Errorf("key %q: lock %q slot %d, counter %q slot %d, channel %q slot %d, holder %q slot %d",
				key, k.Lock, s1, k.Counter, s2, k.Channel, s3, k.Holder, s4)
		}
		if tag := k.Lock[len(redis.DefaultPrefix)+1:]; !strings.HasPrefix(k.Lock, redis.DefaultPrefix+"{") || strings.IndexByte(tag, '}') < 1 {
			t.Errorf("key %q: lock key %q has no non-empty hash tag after the prefix", key, k.Lock)
		}
		if other, dup := seen[k.Lock]; dup {
			t.Errorf("keys %q and %q map to the same lock key %q", key, other, k.Lock)
		}
		seen[k.Lock] = key
	}
	if want := "distlock:{orders/42}"; redisnode.KeysFor(redis.DefaultPrefix, "orders/42").Lock != want {
		t.Errorf("layout changed: %q", redisnode.KeysFor(redis.DefaultPrefix, "orders/42").Lock)
	}

	// The keys on the server are the documented ones: the lock expires, the
	// counter holds the token and expires an hour past the lock.
	l := newLocker(t, srv.Addr(), redis.WithKeyPrefix("app:"))
	ls, err := l.TryAcquire(ctx, "a}b", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var k redis.Keys
	if !ls.As(&k) || k != redisnode.KeysFor("app:", "a}b") {
		t.Fatalf("Lease.As(*Keys) = %+v", k)
	}
	if pttl := admin.PTTL(ctx, k.Lock).Val(); pttl <= 0 || pttl > time.Minute {
		t.Errorf("PTTL %s = %v", k.Lock, pttl)
	}
	if v := admin.Get(ctx, k.Counter).Val(); v != ls.Token().String() {
		t.Errorf("GET %s = %q, want the token %d", k.Counter, v, ls.Token())
	}
	if ttl := admin.PTTL(ctx, k.Counter).Val(); ttl <= redisnode.CounterLinger || ttl > time.Minute+redisnode.CounterLinger {
		t.Errorf("PTTL %s = %v, want the lock's TTL + %v", k.Counter, ttl, redisnode.CounterLinger)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, k.Lock).Val(); n != 0 {
		t.Errorf("lock key still exists after release")
	}
}

// A killed (or frozen) server gives an error within the context deadline.
func TestServerDown(t *testing.T) {
	for _, fault := range []string{"kill", "pause"} {
		t.Run(fault, func(t *testing.T) {
			srv := testserver.Redis(t)
			l := newLocker(t, srv.Addr())
			ctx := t.Context()
			ls, err := l.TryAcquire(ctx, "down", distlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if fault == "kill" {
				err = srv.Kill()
			} else {
				err = srv.Pause()
				t.Cleanup(func() { _ = srv.Resume() })
			}
			if err != nil {
				t.Fatal(err)
			}
			const within = 500 * time.Millisecond
			// Release last: a failed release ends the lease (it may have
			// reached the server), after which Refresh says ErrNotHeld.
			ops := []struct {
				name string
				op   func(context.Context) error
			}{
				{"TryAcquire", func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "other"); return err }},
				{"Acquire", func(ctx context.Context) error { _, err := l.Acquire(ctx, "other"); return err }},
				{"Refresh", func(ctx context.Context) error { return ls.Refresh(ctx) }},
				{"Inspect", func(ctx context.Context) error { _, err := l.Inspect(ctx, "down"); return err }},
				{"Release", ls.Release},
			}
			for _, o := range ops {
				name, op := o.name, o.op
				octx, cancel := context.WithTimeout(ctx, within)
				start := time.Now()
				err := op(octx)
				took := time.Since(start)
				cancel()
				if err == nil {
					t.Errorf("%s on a %sed server succeeded", name, fault)
					continue
				}
				if errors.Is(err, distlock.ErrNotHeld) && name != "Release" {
					t.Errorf("%s on a %sed server: %v; want a server error, not ErrNotHeld", name, fault, err)
				}
				// The portable layer reports an attempt cut short by the
				// deadline as a wait that ended: ErrNotAcquired and ctx.Err().
				if errors.Is(err, distlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s on a %sed server: %v; want a server error, not \"held\"", name, fault, err)
				}
				// Generous slack for a loaded machine; a hang would be 3s+.
				if took > within+time.Second {
					t.Errorf("%s took %v with a %v deadline", name, took, within)
				}
				t.Logf("%s: %v (after %v)", name, err, took.Round(time.Millisecond))
			}
			if fault != "kill" {
				return
			}
			// Given time for go-redis's own retries, the error names the cause.
			octx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			_, err = l.TryAcquire(octx, "other")
			if err == nil || errors.Is(err, distlock.ErrNotAcquired) || !strings.Contains(err.Error(), "refused") {
				t.Errorf("TryAcquire on a killed server with a long deadline: %v; want the connection error", err)
			}
		})
	}
}

func TestWaitReplicas(t *testing.T) {
	srvs := testserver.RedisN(t, 2)
	ctx := t.Context()
	master, replica := newClient(t, srvs[0].Addr()), newClient(t, srvs[1].Addr())
	if err := master.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Do(ctx, "REPLICAOF", "127.0.0.1", srvs[0].Port()).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(replica.Info(ctx, "replication").Val(), "master_link_status:up") ||
		!strings.Contains(master.Info(ctx, "replication").Val(), "connected_slaves:1") {
		if time.Now().After(deadline) {
			t.Fatal("replica did not sync")
		}
		time.Sleep(20 * time.Millisecond)
	}

	l := newLocker(t, srvs[0].Addr(), redis.WithWaitReplicas(1, 5*time.Second))
	ls, err := l.TryAcquire(ctx, "replicated", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	k := redisnode.KeysFor(redis.DefaultPrefix, "replicated")
	// WAIT returned, so the replica has the counter already.
	if v := replica.Get(ctx, k.Counter).Val(); v != ls.Token().String() {
		t.Fatalf("replica's counter = %q right after a WAITed acquire, want %d", v, ls.Token())
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Two replicas are never there: the acquire fails and leaves no lock.
	l2 := newLocker(t, srvs[0].Addr(), redis.WithWaitReplicas(2, 100*time.Millisecond))
	if _, err := l2.TryAcquire(ctx, "replicated"); !errors.Is(err, redis.ErrNotReplicated) {
		t.Fatalf("TryAcquire waiting for 2 of 1 replicas: want ErrNotReplicated, got %v", err)
	}
	if n := master.Exists(ctx, k.Lock).Val(); n != 0 {
		t.Fatal("an unreplicated acquire left its lock behind")
	}
}

// A restart without persistence forgets held locks (the declared caveat),
// but not the token order: the counter is gone, and the next token comes
// from the server's clock, above every token handed out before.
func TestRestartLosesLocks(t *testing.T) {
	srv := testserver.Redis(t) // no appendonly: nothing survives a restart
	ctx := t.Context()
	a, b := newLocker(t, srv.Addr()), newLocker(t, srv.Addr())
	var last *distlock.Lease
	for range 3 {
		ls, err := a.TryAcquire(ctx, "restart", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		last = ls
	}
	held, err := a.TryAcquire(ctx, "restart", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	ls, err := b.TryAcquire(ctx, "restart", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("after a restart without persistence the old lock should be gone: %v", err)
	}
	if ls.Token() <= held.Token() || held.Token() <= last.Token() {
		t.Fatalf("tokens went %d, %d, then %d after the restart; want strictly increasing", last.Token(), held.Token(), ls.Token())
	}
	if !b.Guarantees().RestartLosesLocks {
		t.Fatal("Guarantees().RestartLosesLocks is false")
	}
}
