package etcd

import (
	"testing"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// An attempt that failed before its put was sent (while taking its lease)
// has nothing to give back: were its give-back, finding no key, asked
// again for the release timeout, a burst of them would fill the give-back
// slots.
func TestGiveBackAfterBurstOfAbandonedAttempts(t *testing.T) {
	s := testserver.Etcd(t)
	raw, err := NewBackend(newClient(t, []string{s.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(newClient(t, []string{s.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	testutil.CheckGiveBackAfterBurst(t, raw, other)
}
