package etcd

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// A Locker reuses its key name on a queue once the key is deleted (so
// etcd's index of the queue does not grow with every lock), never while
// the key may exist, and never another Locker's.
func TestKeyNameReused(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	l, other := e.locker(), e.locker()
	first, err := l.Acquire(ctx, "named")
	if err != nil {
		t.Fatal(err)
	}
	name := ownerKey(t, first)
	// Held: a second attempt of the same Locker needs a name of its own.
	if _, err := l.TryAcquire(ctx, "named"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		acquire := l.Acquire
		if i == 1 {
			acquire = l.TryAcquire
		}
		ls, err := acquire(ctx, "named")
		if err != nil {
			t.Fatal(err)
		}
		if got := ownerKey(t, ls); got != name {
			t.Errorf("lock %d after a release: key %q, want the released name %q", i, got, name)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := other.Acquire(ctx, "named")
	if err != nil {
		t.Fatal(err)
	}
	if got := ownerKey(t, ls); got == name {
		t.Errorf("another Locker took the name %q", got)
	}
	// A lock whose key is deleted by someone else is not known deleted by
	// its Release, and its name is not reused.
	if _, err := e.admin.Delete(ctx, ownerKey(t, ls)); err != nil {
		t.Fatal(err)
	}
	waitLost(t, ls, "deleted by hand")
	lost := ownerKey(t, ls)
	again, err := other.Acquire(ctx, "named")
	if err != nil {
		t.Fatal(err)
	}
	if ownerKey(t, again) == lost {
		t.Errorf("the name of a lost lock (%q) was reused", lost)
	}
}
