package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Inspect on etcd, beyond the conformance cases: the queue read as the
// server has it, the TTL as etcd counts it, and the reads racing a holder
// that leaves.

// inspect reads key with l, failing the test on an error.
func inspect(t *testing.T, l distlock.Locker, key string) distlock.Holder {
	t.Helper()
	h, err := l.Inspect(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return h
}

// eventually polls cond every 20ms until it holds, failing after 10s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s (last: %s)", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// queueKeys returns the keys of key's queue, oldest first.
func (e *env) queueKeys(key string) []*mvccpb.KeyValue {
	e.t.Helper()
	resp, err := e.admin.Get(context.Background(), queuePrefix(DefaultPrefix, key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Kvs
}

// The holder is the queue's oldest key: its token, its value, the waiters
// behind it; a waiter that leaves changes the count and nothing else; a
// Refresh that moves the key to a lease of another TTL keeps token and
// value; the first waiter then takes over with its own token and value.
func TestInspectQueue(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	const key = "queue"
	watcher := e.locker()
	if h := inspect(t, watcher, key); h != (distlock.Holder{}) {
		t.Fatalf("a key never taken: %+v, want Holder{} (free, Waiters 0)", h)
	}
	holder, err := e.locker().TryAcquire(ctx, key, distlock.WithTTL(5*time.Second), distlock.WithValue("holder"))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		ls  *distlock.Lease
		err error
	}
	waiters := make([]chan got, 2)
	for i := range waiters {
		waiters[i] = make(chan got, 1)
		go func() {
			ls, err := e.locker().Acquire(ctx, key, distlock.WithTTL(5*time.Second), distlock.WithValue(fmt.Sprint("waiter", i)))
			waiters[i] <- got{ls, err}
		}()
		for e.queueLen(DefaultPrefix, key) != int64(i+2) { // in this order
			time.Sleep(5 * time.Millisecond)
		}
	}
	h := inspect(t, watcher, key)
	if !h.Held || h.Token != holder.Token() || h.Value != "holder" || h.Waiters != 2 || h.TTL <= 0 || h.TTL > 5*time.Second {
		t.Fatalf("held with two waiters: %+v, want token %d, value \"holder\", 2 waiters, TTL in (0, 5s]", h, holder.Token())
	}

	if err := holder.Refresh(ctx, distlock.WithTTL(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	h = inspect(t, watcher, key)
	if !h.Held || h.Token != holder.Token() || h.Value != "holder" || h.TTL <= 5*time.Second || h.TTL > 20*time.Second {
		t.Fatalf("after a Refresh to a 20s TTL (a move to another lease): %+v, want token %d, value \"holder\", TTL in (5s, 20s]", h, holder.Token())
	}

	// The last waiter's lease ends on the server (as when its process
	// dies): the holder stays.
	kvs := e.queueKeys(key)
	if len(kvs) != 3 {
		t.Fatalf("%d keys queued, want 3", len(kvs))
	}
	if _, err := e.admin.Revoke(ctx, clientv3.LeaseID(kvs[2].Lease)); err != nil {
		t.Fatal(err)
	}
	if g := <-waiters[1]; g.err == nil {
		t.Fatal("the waiter whose lease was revoked acquired")
	}
	h = inspect(t, watcher, key)
	if !h.Held || h.Token != holder.Token() || h.Value != "holder" || h.Waiters != 1 {
		t.Fatalf("after the last waiter's lease ended: %+v, want the same holder (token %d) and 1 waiter", h, holder.Token())
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-waiters[0]
	if g.err != nil {
		t.Fatal(g.err)
	}
	h = inspect(t, watcher, key)
	if !h.Held || h.Token != g.ls.Token() || h.Value != "waiter0" || h.Waiters != 0 {
		t.Fatalf("after the hand-over: %+v, want the waiter's token %d and value \"waiter0\", no waiters", h, g.ls.Token())
	}
	if err := g.ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h := inspect(t, watcher, key); h != (distlock.Holder{}) {
		t.Fatalf("after the last release: %+v, want Holder{}", h)
	}
}

// TTL is etcd's count of the holder's lease, in whole seconds rounded
// down: never above the lease's TTL (an integral one), never 0 while the
// key is there (under a second left reads 1ns), and the key reads free
// once etcd has expired the lease.
func TestInspectTTLCountsDown(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	b, l := e.backendLocker()
	const key, ttl = "countdown", 2 * time.Second
	// The backend's own TryLock: the portable layer would give the lock
	// back at its local deadline, before etcd expires it.
	g, err := b.TryLock(ctx, driver.Request{Key: key, TTL: ttl, Owner: "countdown-owner"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		last     = ttl
		underOne bool
	)
	for {
		h := inspect(t, l, key)
		if !h.Held {
			break
		}
		switch {
		case h.Token != distlock.Token(g.Token):
			t.Fatalf("token %d, the grant's %d", h.Token, g.Token)
		case h.TTL <= 0 || h.TTL > last:
			t.Fatalf("TTL %v after %v: want within (0, %v]", h.TTL, last, last)
		case h.TTL%time.Second != 0 && h.TTL != time.Nanosecond:
			t.Fatalf("TTL %v: want whole seconds, or 1ns under a second", h.TTL)
		}
		last = h.TTL
		underOne = underOne || h.TTL < time.Second
		if ctx.Err() != nil {
			t.Fatalf("still held at the test's deadline: %+v", h)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !underOne {
		t.Fatal("the key went without ever reading under a second left: the test did not see the end of the lease")
	}
}

// A holder whose lease ends between Inspect's two reads (the queue, then
// the lease's TTL) is not reported: the queue is read again and shows the
// next holder.
func TestInspectHolderLeavesBetweenReads(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	b, l := e.backendLocker()
	const key = "between"
	first, err := e.locker().TryAcquire(ctx, key, distlock.WithTTL(30*time.Second), distlock.WithValue("first"))
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *distlock.Lease, 1)
	go func() {
		ls, err := e.locker().Acquire(ctx, key, distlock.WithTTL(30*time.Second), distlock.WithValue("second"))
		if err != nil {
			t.Error(err)
		}
		next <- ls
	}()
	for e.queueLen(DefaultPrefix, key) != 2 {
		time.Sleep(5 * time.Millisecond)
	}
	revoked := false
	b.beforeTTL = func() {
		if !revoked {
			revoked = true
			if err := revokeOwner(ctx, e.admin, DefaultPrefix, key); err != nil {
				t.Error(err)
			}
		}
	}
	h, err := b.Inspect(ctx, key)
	b.beforeTTL = nil
	if err != nil {
		t.Fatal(err)
	}
	if !revoked {
		t.Fatal("the hook did not run")
	}
	second := <-next
	if second == nil {
		t.FailNow()
	}
	if !h.Held || distlock.Token(h.Token) != second.Token() || h.Value != "second" || h.Waiters != 0 || h.TTL <= 0 {
		t.Fatalf("holder revoked between the reads: %+v, want the next holder (token %d, value \"second\"), not the first (%d)", h, second.Token(), first.Token())
	}
	_ = second.Release(ctx)

	// Alone in the queue, the holder's end leaves the key free.
	alone, err := l.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second), distlock.WithValue("alone"))
	if err != nil {
		t.Fatal(err)
	}
	b.beforeTTL = func() {
		b.beforeTTL = nil
		if err := revokeOwner(ctx, e.admin, DefaultPrefix, key); err != nil {
			t.Error(err)
		}
	}
	if h, err := b.Inspect(ctx, key); err != nil || h != (driver.Holder{}) {
		t.Fatalf("lone holder (token %d) revoked between the reads: %+v, %v; want Holder{}", alone.Token(), h, err)
	}
}

// A key put under the queue by hand, without a lease, holds the lock until
// it is deleted: Inspect reports it, with no TTL.
func TestInspectKeyWithoutLease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 20*time.Second)
	l := e.locker()
	resp, err := e.admin.Put(ctx, queuePrefix(DefaultPrefix, "manual")+"by-hand", "ops")
	if err != nil {
		t.Fatal(err)
	}
	h := inspect(t, l, "manual")
	want := distlock.Holder{Held: true, Token: distlock.Token(resp.Header.Revision), Value: "ops"}
	if h != want {
		t.Fatalf("Inspect = %+v, want %+v", h, want)
	}
	if _, err := l.TryAcquire(ctx, "manual"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire under a key put by hand: %v, want ErrNotAcquired", err)
	}
}
