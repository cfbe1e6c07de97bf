package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leases: TTL rounding, refresh, the Cmp escape hatch, loss watching and recycling.

// Sub-second and fractional TTLs: the etcd lease is whole seconds (at least
// the server minimum), the lease's Expires never goes past the TTL asked.
func TestTTLRounding(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	for _, ttl := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second} {
		before := time.Now()
		ls, err := l.TryAcquire(ctx, "ttl", distlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		if exp := ls.Expires(); exp.After(after.Add(ttl)) {
			t.Errorf("TTL %v: Expires %v after the acquire's end + TTL", ttl, exp.Sub(after))
		}
		var id clientv3.LeaseID
		if !ls.As(&id) {
			t.Fatal("Lease.As(*clientv3.LeaseID) = false")
		}
		resp, err := e.admin.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := leaseSeconds(ttl); resp.GrantedTTL != want {
			t.Errorf("TTL %v: etcd lease granted %ds, want %ds", ttl, resp.GrantedTTL, want)
		}
		// Honest: the server keeps the key at least until Expires.
		if exp := ls.Expires(); exp.After(before.Add(time.Duration(resp.GrantedTTL) * time.Second)) {
			t.Errorf("TTL %v: Expires %v after the lease could end", ttl, exp.Sub(before))
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A Refresh with another TTL moves the key to another lease; the token stays.
func TestRefreshNewTTLKeepsToken(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	ls, err := e.locker().TryAcquire(ctx, "move", distlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var before, after clientv3.LeaseID
	ls.As(&before)
	if err := ls.Refresh(ctx, distlock.WithTTL(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	ls.As(&after)
	if before == after {
		t.Fatal("a refresh with a new TTL kept the old lease")
	}
	resp, err := e.admin.Get(ctx, queuePrefix(DefaultPrefix, "move"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("%v %v", resp, err)
	}
	if kv := resp.Kvs[0]; kv.CreateRevision != int64(ls.Token()) || clientv3.LeaseID(kv.Lease) != after {
		t.Fatalf("key rev %d lease %x; want token %d lease %x", kv.CreateRevision, kv.Lease, ls.Token(), after)
	}
	// The old lease can be revoked without touching the lock.
	if _, err := e.admin.Revoke(ctx, before); err != nil {
		t.Fatal(err)
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Fatalf("refresh after the old lease was revoked: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The Cmp escape hatch holds exactly while the lease owns the lock.
func TestCmpEscapeHatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	guarded := func(ls *distlock.Lease) bool {
		var cmp clientv3.Cmp
		if !ls.As(&cmp) {
			t.Fatal("Lease.As(*clientv3.Cmp) = false")
		}
		resp, err := e.admin.Txn(ctx).If(cmp).Then(clientv3.OpPut("guarded", ls.Token().String())).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	ls, err := l.TryAcquire(ctx, "cmp")
	if err != nil {
		t.Fatal(err)
	}
	if !guarded(ls) {
		t.Fatal("guarded write failed while holding the lock")
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if guarded(ls) {
		t.Fatal("guarded write succeeded after release")
	}
	ls2, err := l.TryAcquire(ctx, "cmp")
	if err != nil {
		t.Fatal(err)
	}
	if guarded(ls) || !guarded(ls2) {
		t.Fatal("the old lease's Cmp must fail and the new one's hold")
	}
	if err := revokeOwner(ctx, e.admin, DefaultPrefix, "cmp"); err != nil {
		t.Fatal(err)
	}
	if guarded(ls2) {
		t.Fatal("guarded write succeeded after the lease was revoked")
	}
	var cli *clientv3.Client
	if !distlock.As(l, &cli) || cli == nil {
		t.Fatal("Locker As(**clientv3.Client) = false")
	}
}

// With the loss watch, a revoked lease closes Done at once, without a
// refresh; without it, only the local deadline ends it.
func TestLossWatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	ls, err := e.locker().TryAcquire(ctx, "loss", distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := revokeOwner(ctx, e.admin, DefaultPrefix, "loss"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close after the lease was revoked (no refresh, TTL 20s)")
	}
	if !errors.Is(ls.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", ls.Err())
	}

	quiet, err := e.locker(WithLossWatch(false)).TryAcquire(ctx, "quiet", distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := revokeOwner(ctx, e.admin, DefaultPrefix, "quiet"); err != nil {
		t.Fatal(err)
	}
	if err := quiet.Refresh(ctx); !errors.Is(err, distlock.ErrNotHeld) || !errors.Is(err, distlock.ErrLeaseLost) {
		t.Fatalf("Refresh of a revoked lease: want ErrNotHeld and ErrLeaseLost, got %v", err)
	}
}

// Recycled leases: an uncontended acquire on a warm Locker reuses the lease
// of the previous release (no grant).
func TestLeaseRecycled(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	var ids []clientv3.LeaseID
	for i := 0; i < 3; i++ {
		ls, err := l.Acquire(ctx, "recycle")
		if err != nil {
			t.Fatal(err)
		}
		var id clientv3.LeaseID
		ls.As(&id)
		ids = append(ids, id)
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("leases %x: want one recycled lease", ids)
	}
	leases, err := e.admin.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(leases.Leases); n != 1 {
		t.Fatalf("%d leases on the server, want 1", n)
	}
	// A recycled lease revoked behind our back costs one failed attempt,
	// for Acquire and TryAcquire alike, and is not reused.
	for _, acquire := range []func(context.Context, string, ...distlock.CallOption) (*distlock.Lease, error){l.Acquire, l.TryAcquire} {
		if _, err := e.admin.Revoke(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := acquire(ctx, "recycle"); err == nil {
			t.Fatal("acquire on a revoked recycled lease succeeded")
		}
		ls, err := acquire(ctx, "recycle")
		if err != nil {
			t.Fatalf("second attempt after the recycled lease was revoked: %v", err)
		}
		ls.As(&ids[0])
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.queueLen(DefaultPrefix, "recycle"); n != 0 {
			t.Fatalf("%d keys left", n)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	leases, err = e.admin.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(leases.Leases); n != 0 {
		t.Fatalf("%d leases left after Close, want 0", n)
	}
}
