package redisnode_test

// A batch of refreshes or extends must reach each lock on its own shard:
// one script call per lock, routed by its keys (a batched script that
// carries many locks in one call fails these cases).

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

// ringOfTwo is a Ring over two servers, plus a key of each shard.
func ringOfTwo(t *testing.T) (ring *goredis.Ring, direct [2]*goredis.Client, keys [2]redisnode.Keys) {
	srvs := testserver.RedisN(t, 2)
	ring = goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"s0": srvs[0].Addr(), "s1": srvs[1].Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	for i := range direct {
		direct[i] = newClient(t, srvs[i].Addr())
	}
	ctx := t.Context()
	found := [2]bool{}
	for i := 0; !(found[0] && found[1]); i++ {
		k := redisnode.KeysFor("ring:", fmt.Sprint("k", i))
		if err := ring.Set(ctx, k.Lock, "probe", 0).Err(); err != nil {
			t.Fatal(err)
		}
		for s := range direct {
			if direct[s].Exists(ctx, k.Lock).Val() == 1 && !found[s] {
				found[s], keys[s] = true, k
			}
			direct[s].Del(ctx, k.Lock)
		}
	}
	return ring, direct, keys
}

// A Redlock node may be any goredis.UniversalClient (redlock.New takes
// them, and ExtendManyOn takes one). On a Ring, one EVALSHA is routed by its
// first key: a call carrying two locks ran lock B's keys on lock A's shard,
// where B, held by someone else on its own shard, was "retaken" and
// reported ours. Each lock must be judged on its own shard.
func TestExtendManyOnRingWrongShard(t *testing.T) {
	ring, direct, keys := ringOfTwo(t)
	ctx := t.Context()
	a, b := keys[0], keys[1]
	for s := range direct { // see TestRefreshManyOnRingWrongShard
		redisnode.ExtendManyOn(ctx, direct[s], []redisnode.Extend{{Keys: redisnode.KeysFor("warm:", "x"), Owner: "x", TTL: time.Second, Nonce: "w"}})
		direct[s].Del(ctx, redisnode.KeysFor("warm:", "x").Lock)
	}
	if r, err := redisnode.AcquireOn(ctx, ring, a, "me", time.Minute, ""); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	if r, err := redisnode.AcquireOn(ctx, ring, b, "other", time.Minute, ""); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	single, err := redisnode.ExtendOn(ctx, ring, b, "me", time.Minute, 1, "nb", "", 0)
	if err != nil || single != redisnode.ExtendHeldByOther {
		t.Fatalf("ExtendOn(b) = %v, %v; want held by other", single, err)
	}
	res, errs := redisnode.ExtendManyOn(ctx, ring, []redisnode.Extend{
		{Keys: a, Owner: "me", TTL: time.Minute, Token: 1, Nonce: "na"},
		{Keys: b, Owner: "me", TTL: time.Minute, Token: 1, Nonce: "nb"},
	})
	if errs[1] != nil || res[1] != redisnode.ExtendHeldByOther {
		t.Errorf("ExtendManyOn: lock b (held by other on its shard) = %v, %v; want ExtendHeldByOther", res[1], errs[1])
	}
	if v := direct[0].Get(ctx, b.Lock).Val(); v != "" {
		t.Errorf("lock b written on lock a's shard: %q (its own shard holds %q)", v, direct[1].Get(ctx, b.Lock).Val())
	}
}

// Same routing on the refresh side: our own lock B, on its own shard, must
// be reported held and extended when batched after lock A.
func TestRefreshManyOnRingWrongShard(t *testing.T) {
	ring, direct, keys := ringOfTwo(t)
	ctx := t.Context()
	// Load the refresh script on both shards first (a Ring's SCRIPT LOAD
	// reaches one shard: a separate, older problem), so that only the
	// routing is tested.
	for s := range direct {
		redisnode.RefreshManyOn(ctx, direct[s], []redisnode.Refresh{{Keys: redisnode.KeysFor("warm:", "x"), Owner: "x", TTL: time.Second}})
	}
	for _, k := range keys {
		if r, err := redisnode.AcquireOn(ctx, ring, k, "me", 2*time.Second, ""); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
	}
	ok, errs := redisnode.RefreshManyOn(ctx, ring, []redisnode.Refresh{
		{Keys: keys[0], Owner: "me", TTL: time.Minute},
		{Keys: keys[1], Owner: "me", TTL: time.Minute},
	})
	for i := range keys {
		if errs[i] != nil || !ok[i] {
			t.Errorf("RefreshManyOn lock %d (ours): ok %v err %v", i, ok[i], errs[i])
		}
	}
	if p := direct[1].PTTL(ctx, keys[1].Lock).Val(); p < 30*time.Second {
		t.Errorf("lock 1 on its own shard: PTTL %v after a refresh to 1m", p)
	}
}

// On a ClusterClient (a Redlock node may be one; ExtendManyOn takes it), two
// locks of different slots in one script call fail with CROSSSLOT; batched,
// each lock must still be extended and refreshed.
func TestExtendManyOnClusterCrossSlot(t *testing.T) {
	cl := testserver.NewRedisCluster(t, 3)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	var ext []redisnode.Extend
	var ref []redisnode.Refresh
	for i := range 10 {
		k := redisnode.KeysFor("cl:", fmt.Sprint("k", i))
		if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, ""); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		ext = append(ext, redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute, Token: 1, Nonce: "n"})
		ref = append(ref, redisnode.Refresh{Keys: k, Owner: "me", TTL: time.Minute})
	}
	res, errs := redisnode.ExtendManyOn(ctx, c, ext)
	for i := range res {
		if errs[i] != nil || res[i] != redisnode.ExtendRenewed {
			t.Errorf("ExtendManyOn lock %d (ours): %v, %v", i, res[i], errs[i])
		}
	}
	ok, errs := redisnode.RefreshManyOn(ctx, c, ref)
	for i := range ok {
		if errs[i] != nil || !ok[i] {
			t.Errorf("RefreshManyOn lock %d (ours): %v, %v", i, ok[i], errs[i])
		}
	}
}
