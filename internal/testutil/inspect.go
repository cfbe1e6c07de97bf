package testutil

import (
	"testing"

	"github.com/distlock/distlock"
)

// MustHold checks that Inspect on l reports ls as the holder with value v,
// a TTL within the lease's and no waiter count (backends without a queue),
// and returns what it said.
func MustHold(t *testing.T, l distlock.Locker, ls *distlock.Lease, v, why string) distlock.Holder {
	t.Helper()
	h, err := l.Inspect(t.Context(), ls.Key())
	if err != nil {
		t.Fatalf("%s: Inspect: %v", why, err)
	}
	if !h.Held || h.Token != ls.Token() || h.Value != v || h.TTL <= 0 || h.TTL > ls.TTL() || h.Waiters != -1 {
		t.Fatalf("%s: Inspect = %+v; want held with token %d, value %q, 0 < TTL <= %v, Waiters -1", why, h, ls.Token(), v, ls.TTL())
	}
	return h
}
