package redis_test

import (
	"testing"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
)

// One give-back call settles an attempt (the tombstone refuses it if it
// lands later), so a burst of them does not fill the give-back slots.
func TestGiveBackAfterBurstOfAbandonedAttempts(t *testing.T) {
	srv := testserver.Redis(t)
	raw, err := redis.NewBackend(newClient(t, srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckGiveBackAfterBurst(t, raw, newLocker(t, srv.Addr()))
}
