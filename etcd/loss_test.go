package etcd

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The loss watch: one watch on the prefix for every lock of the backend.

const lossNotice = 5 * time.Second // how soon a deletion must close Done

// backendLocker makes a Locker on a backend of its own, which the test can
// reach (hooks on its loss watch).
func (e *env) backendLocker() (*backend, distlock.Locker) {
	e.t.Helper()
	b, err := newBackend(newClient(e.t, []string{e.addr}), false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := distlock.New(b)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = l.Close() })
	return b, l
}

func ownerKey(t *testing.T, ls *distlock.Lease) string {
	t.Helper()
	var cmp clientv3.Cmp
	if !ls.As(&cmp) {
		t.Fatal("Lease.As(*clientv3.Cmp) = false")
	}
	return string(cmp.Key)
}

func waitLost(t *testing.T, ls *distlock.Lease, what string) {
	t.Helper()
	select {
	case <-ls.Done():
	case <-time.After(lossNotice):
		t.Fatalf("%s: Done did not close within %v of the key's deletion (TTL 30s, no refresh)", what, lossNotice)
	}
	if !errors.Is(ls.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("%s: Err = %v, want ErrLeaseLost", what, ls.Err())
	}
}

// A key deleted by hand right after the grant, before anything else, is
// reported; the other locks of the Locker are not.
func TestLossRightAfterGrant(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	l := e.locker()
	other, err := l.TryAcquire(ctx, "other", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		acquire := l.TryAcquire
		if i%2 == 1 {
			acquire = l.Acquire
		}
		ls, err := acquire(ctx, "right-after", distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.Delete(ctx, ownerKey(t, ls)); err != nil {
			t.Fatal(err)
		}
		waitLost(t, ls, "deleted right after the grant")
	}
	if other.Err() != nil {
		t.Fatalf("another lock of the Locker ended: %v", other.Err())
	}
}

// A lock taken before the watch is up, and deleted before it is, is found
// gone by the read made once the watch is up.
func TestLossBeforeWatchIsUp(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	b, l := e.backendLocker()
	gate := make(chan struct{})
	b.loss.beforeWatch = func() { <-gate }
	ls, err := l.TryAcquire(ctx, "early", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := l.TryAcquire(ctx, "kept", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Delete(ctx, ownerKey(t, ls)); err != nil {
		t.Fatal(err)
	}
	close(gate)
	waitLost(t, ls, "deleted before the watch was made")
	time.Sleep(200 * time.Millisecond)
	if kept.Err() != nil {
		t.Fatalf("a lock still there was reported: %v", kept.Err())
	}
}

// A watch that breaks is made again from the revision after the last it
// saw: a deletion meanwhile is reported. If that revision was compacted,
// every lock is read again: the deleted one is reported, the others not.
func TestLossAcrossWatchRestart(t *testing.T) {
	for _, compact := range []bool{false, true} {
		name := "restart"
		if compact {
			name = "compacted"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			b, l := e.backendLocker()
			gate := make(chan struct{}, 1)
			gate <- struct{}{} // the first watch is made at once
			b.loss.beforeWatch = func() { <-gate }
			gone, err := l.TryAcquire(ctx, "gone", distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			kept, err := l.TryAcquire(ctx, "kept", distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			// A deletion the watch sees, so that it has a revision to
			// resume from.
			seen, err := l.TryAcquire(ctx, "seen", distlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.admin.Delete(ctx, ownerKey(t, seen)); err != nil {
				t.Fatal(err)
			}
			waitLost(t, seen, "deleted while the watch was up")

			b.loss.mu.Lock()
			b.loss.cancel() // break the watch; it waits at the gate
			b.loss.mu.Unlock()
			resp, err := e.admin.Delete(ctx, ownerKey(t, gone))
			if err != nil {
				t.Fatal(err)
			}
			if compact {
				if _, err := e.admin.Put(ctx, "unrelated", "x"); err != nil {
					t.Fatal(err)
				}
				if _, err := e.admin.Compact(ctx, resp.Header.Revision+1); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-gone.Done():
				t.Fatal("reported with no watch up: the test does not test the restart")
			case <-time.After(100 * time.Millisecond):
			}
			gate <- struct{}{}
			if compact {
				gate <- struct{}{} // the restart from the compacted revision fails; then afresh
			}
			waitLost(t, gone, "deleted while the watch was down")
			time.Sleep(200 * time.Millisecond)
			if kept.Err() != nil {
				t.Fatalf("a lock still there was reported: %v", kept.Err())
			}
			close(gate)
			// And the watch works on.
			if _, err := e.admin.Delete(ctx, ownerKey(t, kept)); err != nil {
				t.Fatal(err)
			}
			waitLost(t, kept, "deleted after the restart")
		})
	}
}

// Loss notices go on after the server was killed and restarted.
func TestLossAfterServerRestart(t *testing.T) {
	s := testserver.Etcd(t)
	e := &env{t: t, addr: s.Addr(), admin: newClient(t, []string{s.Addr()})}
	ctx := ctxT(t, 60*time.Second)
	l := e.locker()
	ls, err := l.TryAcquire(ctx, "survivor", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := revokeOwner(ctx, e.admin, DefaultPrefix, "survivor"); err != nil {
		t.Fatal(err)
	}
	waitLost(t, ls, "revoked after a server restart")
	// A lock taken after the restart is watched too.
	ls2, err := l.TryAcquire(ctx, "after", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Delete(ctx, ownerKey(t, ls2)); err != nil {
		t.Fatal(err)
	}
	waitLost(t, ls2, "deleted after a server restart")
}

// A failed TryAcquire (the key held, or an unknown outcome) leaves nothing
// registered with the loss watch (otherwise every failed attempt stays in
// it for good).
func TestFailedTryAcquireLeavesNoWatchEntry(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	b, l := e.backendLocker()
	holder, err := l.TryAcquire(ctx, "busy", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const tries = 200
	for range tries {
		if _, err := l.TryAcquire(ctx, "busy", distlock.WithTTL(30*time.Second)); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire on a held key: %v", err)
		}
	}
	entries := func() int {
		b.loss.mu.Lock()
		defer b.loss.mu.Unlock()
		n := 0
		for _, qw := range b.loss.queues {
			n += len(qw.keys)
		}
		return n
	}
	if n := entries(); n != 1 {
		t.Errorf("%d loss-watch entries with 1 lock held after %d failed attempts", n, tries)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := entries(); n != 0 {
		t.Errorf("%d loss-watch entries after the only lock was released", n)
	}
}
