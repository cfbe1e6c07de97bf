package redlock_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// A batched refresh judges each lease from one tally reused lease after
// lease (10b1fe1). Driven directly over 5 nodes with leases of interleaved
// classes, the verdict, the error text (which nodes failed, how many were
// someone else's) and the nodes' state afterwards (give-backs of lost
// leases, repaired holder records) must each be the lease's own: without
// a reset of the failed map between leases, 71 of 54+40 verdicts were
// another lease's.
type batchLease struct {
	class string
	req   driver.Request
	keys  redisnode.Keys
	ref   driver.Refresh
}

func batchSetup(t *testing.T, srvs []*testserver.Server, nt time.Duration) (driver.Backend, driver.Backend, []goredis.UniversalClient) {
	t.Helper()
	b, err := redlock.NewBackend(clients(t, srvs, false), redlock.WithNodeTimeout(nt))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, b, clients(t, srvs, false)
}

func batchAcquire(t *testing.T, b driver.Backend, name, class string, j int, ttl time.Duration) *batchLease {
	t.Helper()
	drift := driver.Drift{Factor: distlock.DefaultDriftFactor, Min: distlock.DefaultDriftMin}
	req := driver.Request{Key: fmt.Sprintf("%s-%d-%s", name, j, class), TTL: ttl, Owner: fmt.Sprint("owner-", name, j),
		Drift: drift, Value: fmt.Sprint("val-", name, j)}
	g, err := b.TryLock(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	g.Key, g.Owner, g.TTL, g.Drift = req.Key, req.Owner, req.TTL, req.Drift
	return &batchLease{class: class, req: req, keys: redisnode.KeysFor(redis.DefaultPrefix, req.Key),
		ref: driver.Refresh{Grant: g, TTL: ttl}}
}

func batchOf(ls []*batchLease) []driver.Refresh {
	out := make([]driver.Refresh, len(ls))
	for i, l := range ls {
		out[i] = l.ref
	}
	return out
}

func mustDo(t *testing.T, cmd interface{ Err() error }) {
	t.Helper()
	if err := cmd.Err(); err != nil {
		t.Fatal(err)
	}
}

// nodesNaming lists the nodes an error's summary names ("node i: ...").
func nodesNaming(err error, n int) []int {
	var out []int
	for i := range n {
		if err != nil && strings.Contains(err.Error(), fmt.Sprintf("node %d: ", i)) {
			out = append(out, i)
		}
	}
	return out
}

func TestRefreshBatchJudgesEachLeaseAlone(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	ctx := t.Context()
	const ttl, nt = 20 * time.Second, 500 * time.Millisecond
	b, br, admins := batchSetup(t, srvs, nt)
	classes := []string{"K", "NQ", "KR", "L", "K", "NEG", "KO", "L2", "K"}
	var ls []*batchLease
	for j := range 54 {
		ls = append(ls, batchAcquire(t, b, "p1", classes[j%len(classes)], j, ttl))
	}
	// Every node's expiry known to every lease.
	batch := batchOf(ls)
	if err := br.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for j, r := range batch {
		if r.Err != nil {
			t.Fatalf("lease %d, all up: %v", j, r.Err)
		}
	}
	rot := func(j, k int) int { return (j + k) % 5 }
	wantFailed := map[int][]int{}
	for j, l := range ls {
		switch l.class {
		case "KR": // taken back on two nodes: kept
			for k := range 2 {
				mustDo(t, admins[rot(j, k)].Del(ctx, l.keys.Lock, l.keys.Holder))
			}
		case "L": // lapsed on three: lost
			for k := range 3 {
				mustDo(t, admins[rot(j, k)].Del(ctx, l.keys.Lock))
			}
		case "L2": // lapsed on two, someone else's on a third: lost
			for k := range 2 {
				mustDo(t, admins[rot(j, k)].Del(ctx, l.keys.Lock))
			}
			mustDo(t, admins[rot(j, 2)].Set(ctx, l.keys.Lock, "someone", ttl))
		case "KO": // someone else's on two: kept on three
			for k := range 2 {
				mustDo(t, admins[rot(j, k)].Set(ctx, l.keys.Lock, "someone", ttl))
			}
		case "NQ": // wrong-typed on three: those fail, no quorum
			for k := range 3 {
				i := rot(j, k)
				mustDo(t, admins[i].Del(ctx, l.keys.Lock))
				mustDo(t, admins[i].HSet(ctx, l.keys.Lock, "f", "v"))
				wantFailed[j] = append(wantFailed[j], i)
			}
			slices.Sort(wantFailed[j])
		case "NEG":
			l.ref.Grant.Token = -1
			wantFailed[j] = []int{0, 1, 2, 3, 4}
		}
	}
	batch = batchOf(ls)
	if err := br.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for j, l := range ls {
		r := batch[j]
		ok := true
		switch l.class {
		case "K", "KR", "KO":
			ok = r.Err == nil && r.Validity == ttl
		case "L":
			ok = errors.Is(r.Err, distlock.ErrNotHeld) && strings.Contains(r.Err.Error(), "held without a break on 2 of 5 nodes (need 3), someone else's on 0")
		case "L2":
			ok = errors.Is(r.Err, distlock.ErrNotHeld) && strings.Contains(r.Err.Error(), "held without a break on 2 of 5 nodes (need 3), someone else's on 1")
		case "NQ":
			ok = errors.Is(r.Err, redlock.ErrNoQuorum) && strings.Contains(r.Err.Error(), "refreshed on 2 of 5 nodes") &&
				fmt.Sprint(nodesNaming(r.Err, 5)) == fmt.Sprint(wantFailed[j]) && strings.Count(r.Err.Error(), "WRONGTYPE") == 3
		case "NEG":
			ok = errors.Is(r.Err, redlock.ErrNoQuorum) && strings.Contains(r.Err.Error(), "refreshed on 0 of 5 nodes") &&
				fmt.Sprint(nodesNaming(r.Err, 5)) == fmt.Sprint(wantFailed[j]) && strings.Count(r.Err.Error(), "negative token") == 5
		}
		if !ok {
			bad++
			t.Errorf("lease %d (%s): validity %v, err %v", j, l.class, r.Validity, r.Err)
		}
	}
	// Give-backs of the lost leases (goroutines over t.yes) reach every
	// node that said yes; repaired locks carry their own lease's record.
	deadline := time.Now().Add(3 * time.Second)
	for j, l := range ls {
		for i, a := range admins {
			v, _ := a.Get(ctx, l.keys.Lock).Result()
			switch l.class {
			case "L", "L2":
				for v == l.req.Owner && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
					v, _ = a.Get(ctx, l.keys.Lock).Result()
				}
				if v == l.req.Owner {
					bad++
					t.Errorf("lease %d (%s): still ours on node %d after its give-back", j, l.class, i)
				}
				if l.class == "L2" && i == rot(j, 2) && v != "someone" {
					bad++
					t.Errorf("lease %d (L2): someone else's lock on node %d now %q", j, i, v)
				}
			case "K", "KR":
				rec := a.HGetAll(ctx, l.keys.Holder).Val()
				if v != l.req.Owner || rec["owner"] != l.req.Owner || rec["value"] != l.req.Value ||
					rec["token"] != fmt.Sprint(l.ref.Grant.Token) || a.PTTL(ctx, l.keys.Lock).Val() < ttl/2 {
					bad++
					t.Errorf("lease %d (%s) on node %d: lock %q, record %v; want ours, token %d", j, l.class, i, v, rec, l.ref.Grant.Token)
				}
			}
		}
	}
	t.Logf("%d leases over 5 nodes, classes %v: %d wrong", len(ls), classes, bad)

	// Phase 2: node 4 silent. Views are made before and after all.rest.
	var ls2 []*batchLease
	classes2 := []string{"K", "NQ2", "KR2", "L3", "K"}
	for j := range 40 {
		ls2 = append(ls2, batchAcquire(t, b, "p2", classes2[j%len(classes2)], j, ttl))
	}
	batch = batchOf(ls2)
	if err := br.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for j, l := range ls2 {
		switch l.class {
		case "KR2":
			for _, i := range []int{0, 1} {
				mustDo(t, admins[i].Del(ctx, l.keys.Lock))
			}
		case "L3":
			for _, i := range []int{0, 1, 2} {
				mustDo(t, admins[i].Del(ctx, l.keys.Lock))
			}
		case "NQ2":
			for _, i := range []int{0, 1} {
				mustDo(t, admins[i].Del(ctx, l.keys.Lock))
				mustDo(t, admins[i].HSet(ctx, l.keys.Lock, "f", "v"))
			}
		}
		_ = j
	}
	if err := srvs[4].Pause(); err != nil {
		t.Fatal(err)
	}
	defer srvs[4].Resume()
	batch = batchOf(ls2)
	start := time.Now()
	if err := br.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	bad2 := 0
	for j, l := range ls2 {
		r := batch[j]
		ok := true
		switch l.class {
		case "K", "KR2":
			ok = r.Err == nil && r.Validity == ttl
		case "L3":
			ok = errors.Is(r.Err, distlock.ErrNotHeld)
		case "NQ2":
			ok = errors.Is(r.Err, redlock.ErrNoQuorum) && strings.Contains(r.Err.Error(), "refreshed on 2 of 5 nodes") &&
				(fmt.Sprint(nodesNaming(r.Err, 5)) == "[0 1 4]" && strings.Count(r.Err.Error(), "WRONGTYPE") == 2 ||
					fmt.Sprint(nodesNaming(r.Err, 5)) == "[0 1]" && strings.Contains(r.Err.Error(), "1 node(s) not "))
		}
		if !ok {
			bad2++
			t.Errorf("phase 2, lease %d (%s): validity %v, err %v", j, l.class, r.Validity, r.Err)
		}
	}
	for j, l := range ls2 {
		if l.class != "L3" {
			continue
		}
		for i, a := range admins[:4] {
			v, _ := a.Get(ctx, l.keys.Lock).Result()
			for v == l.req.Owner && time.Now().Before(deadline.Add(3*time.Second)) {
				time.Sleep(20 * time.Millisecond)
				v, _ = a.Get(ctx, l.keys.Lock).Result()
			}
			if v == l.req.Owner {
				bad2++
				t.Errorf("phase 2, lease %d (L3): still ours on node %d after its give-back", j, i)
			}
		}
	}
	t.Logf("phase 2 (node 4 paused, batch took %v): %d leases, classes %v: %d wrong", took.Round(time.Millisecond), len(ls2), classes2, bad2)
}
