package testutil

import (
	"testing"

	"github.com/distlock/distlock"
)

// MustHold checks that Inspect on l reports ls as the holder with value v,
// a TTL within the lease's and no waiters (0 on backends that queue them,
// -1 elsewhere), and returns what it said.
func MustHold(t *testing.T, l distlock.Locker, ls *distlock.Lease, v, why string) distlock.Holder {
	t.Helper()
	h, err := l.Inspect(t.Context(), ls.Key())
	if err != nil {
		t.Fatalf("%s: Inspect: %v", why, err)
	}
	if !h.Held || h.Token != ls.Token() || h.Value != v || h.TTL <= 0 || h.TTL > ls.TTL() || h.Waiters != noWaiters(l) {
		t.Fatalf("%s: Inspect = %+v; want held with token %d, value %q, 0 < TTL <= %v, Waiters %d", why, h, ls.Token(), v, ls.TTL(), noWaiters(l))
	}
	return h
}

// noWaiters is Inspect's Waiters for a key nobody waits for on l.
func noWaiters(l distlock.Locker) int {
	if g := l.Guarantees(); g.FIFO || g.Wait == distlock.WaitQueue {
		return 0
	}
	return -1
}
