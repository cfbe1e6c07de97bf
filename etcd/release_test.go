package etcd

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// Release(context.Background()) after etcd died blocked for 11 minutes in
// the audit: it must return within the release timeout.
func TestReleaseWithDeadServer(t *testing.T) {
	s := testserver.Etcd(t)
	const rt = time.Second
	l, err := New(newClient(t, []string{s.Addr()}), distlock.WithReleaseTimeout(rt))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	testutil.CheckReleaseWithDeadServer(t, l, "dead", rt, func() {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	})
}

// A TryLock whose outcome is unknown is settled by one give-back: its
// lease is revoked, which deletes the key if the put landed and refuses the
// put if it lands later (otherwise such a key stays held for a whole TTL).
func TestGiveBackRevokesTheAttemptsLease(t *testing.T) {
	s := testserver.Etcd(t)
	cli := newClient(t, []string{s.Addr()})
	bb, err := NewBackend(cli)
	if err != nil {
		t.Fatal(err)
	}
	b := bb.(*backend)
	t.Cleanup(func() { _ = b.Close() })
	ctx := t.Context()
	req := driver.Request{Key: "k", TTL: time.Minute, Owner: "attempt-1"}
	g, err := b.TryLock(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handle.(*handle)
	// As TryLock does when the Txn's reply is lost.
	h.mu.Lock()
	l := h.lease
	h.mu.Unlock()
	b.drop(h.key, l)
	if err := b.Unlock(ctx, driver.Grant{Key: req.Key, Owner: req.Owner, TTL: req.TTL}); err != nil {
		t.Fatalf("give-back: %v", err)
	}
	if resp, err := cli.Get(ctx, h.key); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the attempt's key after the give-back: %v, %v", resp, err)
	}
	// A copy of the put landing now is refused: its lease is gone.
	if _, err := cli.Put(ctx, h.key, "", clientv3.WithLease(l.id)); err == nil {
		t.Fatal("a late put on the attempt's lease succeeded after the give-back")
	}
}
