package election_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// redisElection returns the election of role on a Locker with its own
// client of the redis-server at addr, closed at the end of the test.
func redisElection(t *testing.T, addr, role string) *election.Election {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	l, err := redis.New(c, redis.WithCloseClient(true))
	if err != nil {
		_ = c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	el, err := election.New(l, role)
	if err != nil {
		t.Fatal(err)
	}
	return el
}

// nextLeader reads the next leader Observe reports, failing after within.
func nextLeader(t *testing.T, seen <-chan election.Leader, within time.Duration, why string) election.Leader {
	t.Helper()
	select {
	case got, ok := <-seen:
		if !ok {
			t.Fatalf("%s: Observe's channel closed", why)
		}
		return got
	case <-time.After(within):
		t.Fatalf("%s: Observe reported nothing within %v", why, within)
	}
	panic("unreachable")
}

// A restart from a snapshot taken during an older term brings that term's
// lock back, with its smaller token, after a newer leader was reported:
// Observe must not report the older leader again, only the next leader
// with a larger token.
func TestObserveNeverReportsAnOlderLeaderAfterRestart(t *testing.T) {
	srv := testserver.Redis(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	const role = "role"
	seen, err := redisElection(t, srv.Addr(), role).Observe(ctx, distlock.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const patience = 10 * time.Second

	a, err := redisElection(t, srv.Addr(), role).Campaign(ctx, "a", distlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := nextLeader(t, seen, patience, "a elected"); got.Token != a.Token() || got.Value != "a" {
		t.Fatalf("Observe reported %+v, want a (token %d)", got, a.Token())
	}
	if err := admin.Save(ctx).Err(); err != nil { // the snapshot holds a's lock and record
		t.Fatal(err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := redisElection(t, srv.Addr(), role).Campaign(ctx, "b", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := nextLeader(t, seen, patience, "b elected"); got.Token != b.Token() || got.Value != "b" {
		t.Fatalf("Observe reported %+v, want b (token %d)", got, b.Token())
	}

	// b's grant is lost: the server comes back with a's lock, for the rest
	// of its TTL.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := admin.HGet(ctx, redisnode.KeysFor(redis.DefaultPrefix, role).Holder, "value").Result(); err != nil || v != "a" {
		t.Fatalf("after the restart the holder record's value is %q (%v); the test wants a's record back", v, err)
	}
	c, err := redisElection(t, srv.Addr(), role).Campaign(ctx, "c", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c.Token() <= b.Token() {
		t.Fatalf("c's token %d is not above b's %d", c.Token(), b.Token())
	}
	got := nextLeader(t, seen, patience, "c elected")
	if got.Token != c.Token() || got.Value != "c" {
		t.Fatalf("after b (token %d) Observe reported %+v; want c (token %d), never a leader with a smaller token",
			b.Token(), got, c.Token())
	}
}
