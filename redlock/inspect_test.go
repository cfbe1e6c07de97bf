package redlock_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// mustBeFree checks that Inspect reports key free.
func mustBeFree(t *testing.T, l distlock.Locker, key, why string) {
	t.Helper()
	if h, err := l.Inspect(t.Context(), key); err != nil || h != (distlock.Holder{Waiters: -1}) {
		t.Fatalf("%s: Inspect = %+v, %v; want free", why, h, err)
	}
}

// Inspect reads a majority: a node down changes nothing, two of three down
// is ErrNoQuorum (and ErrUnavailable). The TTL it reports is within what
// the majority's nodes say, less the drift allowance.
func TestInspectNodeDown(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs)
	ctx := t.Context()
	mustBeFree(t, l, "k", "a key never taken")
	ls, err := l.TryAcquire(ctx, "k", distlock.WithTTL(10*time.Second), distlock.WithValue("v"))
	if err != nil {
		t.Fatal(err)
	}
	// Phase 2 may have written the record on a bare majority; the refresh
	// writes it on the node that answered phase 1 late, so that any two
	// nodes confirm the lease.
	if err := ls.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, admins, redisnode.KeysFor(redis.DefaultPrefix, "k"), ls)
	h := testutil.MustHold(t, l, ls, "v", "all nodes up")
	var pttls []time.Duration
	for _, a := range admins {
		pttls = append(pttls, a.PTTL(ctx, redisnode.KeysFor(redis.DefaultPrefix, "k").Lock).Val())
	}
	slices.Sort(pttls)
	// Read after Inspect returned: the majority's shortest is now shorter
	// than it was, by less than the drift allowance (1% of 10s).
	if h.TTL > pttls[1] {
		t.Errorf("Inspect TTL %v, longer than the majority's shortest PTTL %v (PTTLs %v)", h.TTL, pttls[1], pttls)
	}
	if err := srvs[2].Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.MustHold(t, l, ls, "v", "one node of three down")
	if err := srvs[1].Kill(); err != nil {
		t.Fatal(err)
	}
	h, err = l.Inspect(ctx, "k")
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Inspect with two nodes of three down = %+v, %v; want ErrNoQuorum and ErrUnavailable", h, err)
	}
}

// A node restarted without its data is taken back by the holder's refresh
// after another client's attempt left its counter above the lease's token:
// Inspect still reports the lease's token, from the holder record the
// refresh wrote there, and the value with it.
func TestInspectAfterRestartWithoutPersistence(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs)
	ctx := t.Context()
	ls, err := l.TryAcquire(ctx, "k", distlock.WithTTL(5*time.Second), distlock.WithValue("v"))
	if err != nil {
		t.Fatal(err)
	}
	// The acquire returns at a quorum: a refresh, and its late answers,
	// let the lease know it holds all three nodes, so that it survives the
	// loss of node 0.
	if err := ls.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := srvs[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srvs[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	k := redisnode.KeysFor(redis.DefaultPrefix, "k")
	// Another client's attempt, granted by node 0 alone (a minority), and
	// given back.
	r, err := redisnode.AcquireOn(ctx, admins[0], k, "other", time.Minute, "")
	if err != nil || !r.Acquired || r.Token <= ls.Token() {
		t.Fatalf("acquire on the restarted node = %+v, %v; the test wants a token above %d", r, err, ls.Token())
	}
	if ok, err := redisnode.ReleaseOn(ctx, admins[0], k, "other", 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := ls.Refresh(ctx); err != nil { // takes node 0 back
		t.Fatal(err)
	}
	var c int64
	if !testutil.Soon(func() bool { c, _ = admins[0].Get(ctx, k.Counter).Int64(); return distlock.Token(c) > ls.Token() }) {
		t.Fatalf("node 0's counter %d; the test wants it above the lease's token %d", c, ls.Token())
	}
	testutil.MustHold(t, l, ls, "v", "node 0 taken back")
	// Node 1 down: node 0 (taken back, its counter above the token) and
	// node 2 are the majority that confirms the lease with their records.
	if err := srvs[1].Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.MustHold(t, l, ls, "v", "the majority of node 0 (taken back) and node 2")
	// With node 2's record lost too, one record is left: node 1, down,
	// could confirm it or not, so Inspect cannot tell.
	if err := admins[2].Del(ctx, k.Holder).Err(); err != nil {
		t.Fatal(err)
	}
	if h, err := l.Inspect(ctx, "k"); !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("Inspect with the record on 1 node of 3 and 1 node down = %+v, %v; want ErrNoQuorum", h, err)
	}
}

// waitRecorded waits until every node holds the lock with ls's holder
// record: an acquire and a refresh return at a quorum, and the last node's
// answer can still be on its way.
func waitRecorded(t *testing.T, admins []goredis.UniversalClient, k redisnode.Keys, ls *distlock.Lease) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := 0
		for _, a := range admins {
			if nl, err := redisnode.InspectOn(t.Context(), a, k); err == nil && nl.Recorded && nl.Token == ls.Token() {
				n++
			}
		}
		if n == len(admins) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease's record is on %d of %d nodes after 5s", n, len(admins))
		}
	}
}

// A minority holding the lock for another owner (an attempt that got one
// node, with a value and a larger token) does not change what Inspect
// reports of the majority's holder.
func TestInspectMinorityOtherOwner(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs)
	ctx := t.Context()
	ls, err := l.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute), distlock.WithValue("mine"))
	if err != nil {
		t.Fatal(err)
	}
	k := redisnode.KeysFor(redis.DefaultPrefix, "k")
	if err := ls.Refresh(ctx); err != nil { // writes the record wherever phase 2 did not
		t.Fatal(err)
	}
	waitRecorded(t, admins, k, ls)
	if err := admins[2].Del(ctx, k.Lock).Err(); err != nil { // node 2's clock jumped
		t.Fatal(err)
	}
	r, err := redisnode.AcquireOn(ctx, admins[2], k, "intruder", time.Minute, "theirs")
	if err != nil || !r.Acquired || r.Token <= ls.Token() {
		t.Fatalf("intruder's acquire on node 2 = %+v, %v", r, err)
	}
	testutil.MustHold(t, l, ls, "mine", "a minority holds it for another owner")
}

// A majority holding the lock for an owner whose phase 2 has not written
// its record on a majority is not a holder: free, whatever records of
// other owners are left. Phase 2 on one node of the majority only (a
// failed acquire) is not enough: a later majority can miss that node and
// get a smaller token, so reporting it would put an older holder after a
// newer one. Phase 2 on a majority makes it held, with the record's token
// and value.
func TestInspectHeldOnlyWithRecordsOnAMajority(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs)
	ctx := t.Context()
	k := redisnode.KeysFor(redis.DefaultPrefix, "k")
	for _, a := range admins[:2] {
		if err := a.Set(ctx, k.Lock, "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := a.HSet(ctx, k.Holder, "owner", "old", "token", "5", "value", "old").Err(); err != nil {
			t.Fatal(err)
		}
	}
	mustBeFree(t, l, "k", "a majority after phase 1 only")
	if ok, err := redisnode.RaiseTokenOn(ctx, admins[1], k, "x", 77, time.Minute, "vx"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	mustBeFree(t, l, "k", "phase 2 on one node of the majority")
	if ok, err := redisnode.RaiseTokenOn(ctx, admins[0], k, "x", 77, time.Minute, "vx"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	h, err := l.Inspect(ctx, "k")
	if err != nil || !h.Held || h.Token != 77 || h.Value != "vx" || h.TTL <= 0 || h.TTL > time.Minute {
		t.Fatalf("after phase 2 on the majority: Inspect = %+v, %v; want token 77, value vx", h, err)
	}
}

// With the lock on one node, free on another and the third silent, the
// answer depends on the silent node: an error, not "free".
func TestInspectUndecided(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	l := newLocker(t, srvs, redlock.WithNodeTimeout(100*time.Millisecond))
	ctx := t.Context()
	k := redisnode.KeysFor(redis.DefaultPrefix, "k")
	if err := admins[0].Set(ctx, k.Lock, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := redisnode.RaiseTokenOn(ctx, admins[0], k, "x", 77, time.Minute, ""); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := srvs[2].Pause(); err != nil {
		t.Fatal(err)
	}
	h, err := l.Inspect(ctx, "k")
	if err := srvs[2].Resume(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Inspect held on 1 node, free on 1, 1 silent = %+v, %v; want ErrNoQuorum", h, err)
	}
	mustBeFree(t, l, "k", "held on 1 node of 3")
}

// Refreshes, one by one and in batches, carry the value: a node whose
// record is missing (its phase 2 was lost) gets it back with the lease's
// token.
func TestInspectRefreshWritesRecords(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	ctx := t.Context()
	b, err := redlock.NewBackend(clients(t, srvs, false))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	in := b
	var batch []driver.Refresh
	for _, v := range []string{"one", "", "three"} {
		req := driver.Request{Key: "k-" + v, TTL: time.Minute, Owner: "owner-" + v, Value: v}
		g, err := b.TryLock(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		g.Key, g.Owner, g.TTL = req.Key, req.Owner, req.TTL
		batch = append(batch, driver.Refresh{Grant: g, TTL: time.Minute})
	}
	wipe := func() {
		t.Helper()
		for _, r := range batch {
			for _, a := range admins {
				if err := a.Del(ctx, redisnode.KeysFor(redis.DefaultPrefix, r.Grant.Key).Holder).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if h, err := in.Inspect(ctx, r.Grant.Key); err != nil || h.Held {
				t.Fatalf("%s without its records: Inspect = %+v, %v; want not held", r.Grant.Key, h, err)
			}
		}
	}
	check := func(why string) {
		t.Helper()
		for _, r := range batch {
			h, err := in.Inspect(ctx, r.Grant.Key)
			want := r.Grant.Key[len("k-"):]
			if err != nil || !h.Held || h.Token != r.Grant.Token || h.Value != want {
				t.Errorf("%s: %s: Inspect = %+v, %v; want token %d, value %q", why, r.Grant.Key, h, err, r.Grant.Token, want)
			}
		}
	}
	check("after the acquires")
	wipe()
	for _, r := range batch {
		if _, err := b.Refresh(ctx, r.Grant, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	check("after single refreshes")
	wipe()
	if err := b.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for _, r := range batch {
		if r.Err != nil {
			t.Fatal(r.Grant.Key, r.Err)
		}
	}
	check("after a batch refresh")
}
