package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Many renewing leases stay held over several intervals, renewed in batches
// by the Locker's one renewer, and neither the library nor the etcd client
// starts goroutines per lease (one loss watch for all).
func TestManyRenewingLeases(t *testing.T) {
	const n, ttl = 500, 3 * time.Second
	e := newEnv(t)
	ctx := ctxT(t, 120*time.Second)
	cli := newClient(t, []string{e.addr})
	if _, err := cli.Get(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	ours := []string{"github.com/distlock/distlock", "go.etcd.io/etcd/client/v3"}
	l, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// One lease first: the Locker's own goroutines (renewer, loss watch)
	// are then running.
	first, err := l.TryAcquire(ctx, "many-first", distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := testutil.Goroutines(ours...)
	leases := []*distlock.Lease{first}
	for i := range n {
		ls, err := l.TryAcquire(ctx, fmt.Sprint("many-", i), distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, ls)
	}
	// Two TTLs: each lease is renewed several times (every TTL/3).
	if err := sleepCtx(ctx, 2*ttl); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, ls := range leases {
		if err := ls.Err(); err != nil {
			if lost == 0 {
				t.Errorf("%s: %v", ls.Key(), err)
			}
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d leases lost while renewing", lost, len(leases))
	}
	// The fewest seen over a second: a refresh call in flight runs on a
	// goroutine of its own for its time.
	got, dump := testutil.Goroutines(ours...)
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		if n, d := testutil.Goroutines(ours...); n < got {
			got, dump = n, d
		}
	}
	if got > base+4 {
		t.Fatalf("%d goroutines with %d leases held, %d with one: not O(1) per Locker\n%s", got, len(leases), base, dump)
	}
	resp, err := e.admin.Get(ctx, DefaultPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != int64(len(leases)) {
		t.Fatalf("%d keys on the server, want %d", resp.Count, len(leases))
	}
	for _, ls := range leases {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RefreshBatch gives each grant the outcome Refresh would: renewed, lease
// revoked, key deleted, already released, moved to another TTL.
func TestRefreshBatchOutcomes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	b, err := newBackend(newClient(t, []string{e.addr}), false, []driver.Option{WithLossWatch(false).DriverOption()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const ttl = 3 * time.Second
	names := []string{"ok1", "ok2", "revoked", "deleted", "released", "moved"}
	grants := map[string]driver.Grant{}
	for _, k := range names {
		g, err := b.TryLock(ctx, driver.Request{Key: k, TTL: ttl, Owner: "o-" + k})
		if err != nil {
			t.Fatal(err)
		}
		g.Key, g.TTL = k, ttl
		grants[k] = g
	}
	h := func(k string) *handle { return grants[k].Handle.(*handle) }
	if _, err := e.admin.Revoke(ctx, h("revoked").lease.id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Delete(ctx, h("deleted").key); err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx, grants["released"]); err != nil {
		t.Fatal(err)
	}
	// Let the leases run down below the TTL, so that they are renewed.
	time.Sleep(1100 * time.Millisecond)
	batch := make([]driver.Refresh, len(names))
	for i, k := range names {
		batch[i] = driver.Refresh{Grant: grants[k], TTL: ttl}
		if k == "moved" {
			batch[i].TTL = 6 * time.Second
		}
	}
	start := time.Now()
	if err := b.RefreshBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for i, k := range names {
		r := batch[i]
		switch k {
		case "ok1", "ok2", "moved":
			if r.Err != nil || r.Validity != r.TTL {
				t.Errorf("%s: validity %v err %v, want %v and no error", k, r.Validity, r.Err, r.TTL)
			}
			resp, err := e.admin.TimeToLive(ctx, h(k).lease.id)
			if err != nil {
				t.Fatal(err)
			}
			if left := time.Duration(resp.TTL) * time.Second; left < r.TTL-time.Second || start.Add(r.Validity).After(time.Now().Add(left+time.Second)) {
				t.Errorf("%s: lease has %v left on the server after the refresh", k, left)
			}
		default:
			if !errors.Is(r.Err, distlock.ErrNotHeld) {
				t.Errorf("%s: err %v, want ErrNotHeld", k, r.Err)
			}
		}
	}
}
