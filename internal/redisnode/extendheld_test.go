package redisnode_test

// ExtendManyOn on a plain client extends the locks still ours many to a
// script call (extend_held.lua) and sends extend.lua, one call each, for the
// rest. A call carrying many locks reaches one server; these tests hold it
// to never judging a lock on a server where the lock is not.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

// firstKeyProxy makes a plain *goredis.Client behave as one connected to a
// proxy that shards by a command's first key (twemproxy and Envoy route
// EVALSHA so): every command, alone or pipelined, runs on the shard of its
// first key, whatever keys follow.
type firstKeyProxy struct{ shards []*goredis.Client }

func (p firstKeyProxy) shardOf(cmd goredis.Cmder) *goredis.Client {
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
	h := 0
	for _, c := range key {
		h = h*31 + int(c)
	}
	return p.shards[(h&0x7fffffff)%len(p.shards)]
}

func (p firstKeyProxy) run(ctx context.Context, cmd goredis.Cmder) {
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

func (p firstKeyProxy) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (p firstKeyProxy) ProcessHook(goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		p.run(ctx, cmd)
		return cmd.Err()
	}
}

func (p firstKeyProxy) ProcessPipelineHook(goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
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
	srvs := testserver.RedisN(t, 2)
	proxy := firstKeyProxy{}
	for _, s := range srvs {
		proxy.shards = append(proxy.shards, newClient(t, s.Addr()))
	}
	c := newClient(t, srvs[0].Addr()) // its address is never used: the hook runs every command
	c.AddHook(proxy)
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

// The locks still ours go many to a call: 128 held locks take two script
// calls, not 128 (were they sent one by one, this test would fail, and the
// renewal cost it exists for would be back).
func TestExtendManyCallsPerLock(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	var locks []redisnode.Extend
	for i := range 128 {
		k := redisnode.KeysFor("cnt:", fmt.Sprint("k", i))
		if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Second, ""); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		locks = append(locks, redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute, Token: 1, Nonce: fmt.Sprint("n", i)})
	}
	redisnode.ExtendManyOn(ctx, c, locks[:2]) // loads the scripts
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := redisnode.ExtendManyOn(ctx, c, locks)
	for i := range locks {
		if errs[i] != nil || res[i] != redisnode.ExtendRenewed {
			t.Fatalf("lock %d: %v, %v", i, res[i], errs[i])
		}
	}
	stats := c.Info(ctx, "commandstats").Val()
	calls := ""
	for _, line := range strings.Split(stats, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") {
			calls = strings.TrimSpace(line)
		}
	}
	if !strings.HasPrefix(calls, "cmdstat_evalsha:calls=2,") {
		t.Errorf("128 held locks: %q; want 2 script calls", calls)
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
