package zookeeper

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
)

// Release(context.Background()) of a lease lost to a dead ZooKeeper must
// return within the release timeout (the audit saw 2 s).
func TestReleaseWithDeadServer(t *testing.T) {
	s := testserver.ZooKeeper(t)
	const rt = time.Second
	l, err := Dial(ctxFor(t, 20*time.Second), []string{s.Addr()}, WithSessionTimeout(4*time.Second), distlock.WithReleaseTimeout(rt))
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
