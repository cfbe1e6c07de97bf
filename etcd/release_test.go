package etcd

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
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
