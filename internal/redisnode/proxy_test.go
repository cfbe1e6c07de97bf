package redisnode_test

// A Redlock node may be a plain client connected to a proxy that shards by
// a command's first key. A batch of extends must judge each lock on the
// server its own key routes to, now: two batched scripts (many locks to a
// call) were broken by these cases.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

// firstKeyProxy makes a plain *goredis.Client behave as one connected to a
// proxy that shards by a command's first key (twemproxy and Envoy route
// EVALSHA so): every command, alone or pipelined, runs on the shard of its
// first key, whatever keys follow. While a shard is ejected (a proxy's
// answer to a failed shard: twemproxy's auto_eject_hosts, hashing over the
// healthy hosts), its keys go to the next shard, and home again after.
type firstKeyProxy struct {
	shards  []*goredis.Client
	ejected atomic.Int32 // the ejected shard's index, or -1
}

func newFirstKeyProxy(t *testing.T, shards int) *firstKeyProxy {
	p := &firstKeyProxy{}
	p.ejected.Store(-1)
	for _, s := range testserver.RedisN(t, shards) {
		p.shards = append(p.shards, newClient(t, s.Addr()))
	}
	return p
}

// client is a plain client whose every command the proxy runs.
func (p *firstKeyProxy) client(t *testing.T) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled: the hook runs every command
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(p)
	return c
}

// home is the shard key lives on while no shard is ejected.
func (p *firstKeyProxy) home(key string) int {
	h := 0
	for _, c := range key {
		h = h*31 + int(c)
	}
	return (h & 0x7fffffff) % len(p.shards)
}

func (p *firstKeyProxy) shardOf(cmd goredis.Cmder) *goredis.Client {
	args := cmd.Args()
	key := ""
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "evalsha", "eval":
		if len(args) > 3 {
			key = fmt.Sprint(args[3])
		}
	default:
		if len(args) > 1 {
			key = fmt.Sprint(args[1])
		}
	}
	s := p.home(key)
	if int(p.ejected.Load()) == s {
		s = (s + 1) % len(p.shards)
	}
	return p.shards[s]
}

func (p *firstKeyProxy) run(ctx context.Context, cmd goredis.Cmder) {
	c := p.shardOf(cmd)
	fresh := c.Do(ctx, cmd.Args()...)
	switch to := cmd.(type) {
	case *goredis.Cmd:
		to.SetVal(fresh.Val())
		to.SetErr(fresh.Err())
	default:
		cmd.SetErr(fmt.Errorf("firstKeyProxy: %T not supported", cmd))
	}
}

func (p *firstKeyProxy) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (p *firstKeyProxy) ProcessHook(goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		p.run(ctx, cmd)
		return cmd.Err()
	}
}

func (p *firstKeyProxy) ProcessPipelineHook(goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			p.run(ctx, cmd)
		}
		return nil
	}
}

// Behind a first-key-routing proxy, a call of many locks runs on the shard
// of its first lock. Every lock must still get its own shard's verdict
// (ours: extended; missing: taken back on its own shard; someone else's:
// untouched), and nothing may be written on a shard a lock does not live on.
func TestExtendManyBehindFirstKeyProxy(t *testing.T) {
	proxy := newFirstKeyProxy(t, 2)
	c := proxy.client(t)
	ctx := t.Context()
	const n = 90
	var locks []redisnode.Extend
	want := make([]redisnode.Extended, n)
	for i := range n {
		k := redisnode.KeysFor("px:", fmt.Sprint("k", i))
		switch i % 3 {
		case 0:
			if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Second, ""); err != nil || !r.Acquired {
				t.Fatal(r, err)
			}
			want[i] = redisnode.ExtendRenewed
		case 1:
			want[i] = redisnode.ExtendRetaken
		case 2:
			if r, err := redisnode.AcquireOn(ctx, c, k, "other", time.Minute, ""); err != nil || !r.Acquired {
				t.Fatal(r, err)
			}
			want[i] = redisnode.ExtendHeldByOther
		}
		locks = append(locks, redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute, Token: 7, Nonce: fmt.Sprint("n", i)})
	}
	res, errs := redisnode.ExtendManyOn(ctx, c, locks)
	for i, l := range locks {
		if errs[i] != nil || res[i] != want[i] {
			t.Errorf("lock %d: %v, %v; want %v", i, res[i], errs[i], want[i])
		}
		home := proxy.shardOf(goredis.NewCmd(ctx, "get", l.Keys.Lock))
		for _, s := range proxy.shards {
			v := s.Get(ctx, l.Keys.Lock).Val()
			switch {
			case s != home && v != "":
				t.Errorf("lock %d written on a shard it does not live on: %q", i, v)
			case s == home && want[i] == redisnode.ExtendHeldByOther && v != "other":
				t.Errorf("lock %d: someone else's lock now %q", i, v)
			case s == home && want[i] != redisnode.ExtendHeldByOther:
				if v != "me" || s.PTTL(ctx, l.Keys.Lock).Val() < 30*time.Second {
					t.Errorf("lock %d on its shard: %q, PTTL %v; want ours, extended to 1m", i, v, s.PTTL(ctx, l.Keys.Lock).Val())
				}
			}
		}
	}
}

// The proxy ejects shard 1 for a while, then routes its keys home again
// (the shard restarted empty). Meanwhile our refresh took locks b1 and b2
// back on shard 0, routed there by their own keys: correct then. Back home,
// b1 is someone else's and b2 is missing; the copies left on shard 0 hold
// our owner value and must expire by themselves. A batched script, routed
// by its first lock (a, on shard 0), extended them and reported both locks
// held without a break (at the Redlock level, two holders).
func TestExtendManyAfterProxyReroutes(t *testing.T) {
	p := newFirstKeyProxy(t, 2)
	c := p.client(t)
	ctx := t.Context()
	var a, b1, b2 redisnode.Keys // a on shard 0, b1 and b2 on shard 1
	for i := 0; a.Lock == "" || b2.Lock == ""; i++ {
		k := redisnode.KeysFor("ej:", fmt.Sprint("k", i))
		switch h := p.home(k.Lock); {
		case h == 0 && a.Lock == "":
			a = k
		case h == 1 && b1.Lock == "":
			b1 = k
		case h == 1 && b2.Lock == "":
			b2 = k
		}
	}
	for _, k := range []redisnode.Keys{a, b1, b2} {
		if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, ""); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
	}
	batch := func(nonce string) []redisnode.Extend {
		var out []redisnode.Extend
		for _, k := range []redisnode.Keys{a, b1, b2} {
			out = append(out, redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute, Token: 7, Nonce: nonce + k.Lock})
		}
		return out
	}
	p.ejected.Store(1)
	if res, errs := redisnode.ExtendManyOn(ctx, c, batch("r1")); res[1] != redisnode.ExtendRetaken || errs[1] != nil {
		t.Fatalf("during the ejection, b1: %v, %v; want taken back on shard 0", res[1], errs[1])
	}
	p.shards[1].FlushAll(ctx)
	p.ejected.Store(-1)
	if r, err := redisnode.AcquireOn(ctx, c, b1, "other", time.Minute, ""); err != nil || !r.Acquired {
		t.Fatal("another client's acquire of b1:", r, err)
	}
	p.shards[0].PExpire(ctx, b1.Lock, 5*time.Second) // the stale copy
	want := []redisnode.Extended{redisnode.ExtendRenewed, redisnode.ExtendHeldByOther, redisnode.ExtendRetaken}
	res, errs := redisnode.ExtendManyOn(ctx, c, batch("r2"))
	for i, name := range []string{"a", "b1", "b2"} {
		if errs[i] != nil || res[i] != want[i] {
			t.Errorf("lock %s: %v, %v; want %v", name, res[i], errs[i], want[i])
		}
	}
	if ttl := p.shards[0].PTTL(ctx, b1.Lock).Val(); ttl > 5*time.Second {
		t.Errorf("b1's stale copy on shard 0 (not its shard) extended: PTTL 5s -> %v", ttl)
	}
}

// A plain client on a cluster-mode server that owns every slot: the server
// refuses a call whose keys span slots (CROSSSLOT), so every lock must get
// its verdict from its own call.
func TestExtendManyOneShardClusterPlainClient(t *testing.T) {
	cl := testserver.NewRedisCluster(t, 1)
	c := newClient(t, cl.Nodes[0].Addr())
	ctx := t.Context()
	var locks []redisnode.Extend
	for i := range 10 {
		k := redisnode.KeysFor("os:", fmt.Sprint("k", i))
		if i%2 == 0 {
			if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Second, ""); err != nil || !r.Acquired {
				t.Fatal(r, err)
			}
		}
		locks = append(locks, redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute, Token: 1, Nonce: fmt.Sprint("n", i)})
	}
	res, errs := redisnode.ExtendManyOn(ctx, c, locks)
	for i := range locks {
		want := redisnode.ExtendRenewed
		if i%2 == 1 {
			want = redisnode.ExtendRetaken
		}
		if errs[i] != nil || res[i] != want {
			t.Errorf("lock %d: %v, %v; want %v", i, res[i], errs[i], want)
		}
	}
}

// A negative token is refused per lock, as ExtendOn refuses it, and the
// other locks of the batch are extended.
func TestExtendManyNegativeToken(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	var locks []redisnode.Extend
	for i := range 3 {
		k := redisnode.KeysFor("neg:", fmt.Sprint("k", i))
		if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Second, ""); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		locks = append(locks, redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute, Token: 1, Nonce: fmt.Sprint("n", i)})
	}
	locks[1].Token = -1
	res, errs := redisnode.ExtendManyOn(ctx, c, locks)
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "negative token") {
		t.Errorf("lock 1 (token -1): %v, %v; want a negative-token error", res[1], errs[1])
	}
	if p := c.PTTL(ctx, locks[1].Keys.Lock).Val(); p > 2*time.Second {
		t.Errorf("lock 1 (token -1) extended anyway: PTTL %v", p)
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil || res[i] != redisnode.ExtendRenewed {
			t.Errorf("lock %d: %v, %v", i, res[i], errs[i])
		}
	}
}
