package redis_test

import (
	"errors"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// The documented ACL leaves CONFIG GET out; with eviction=refuse, Open
// fails with ErrEvictionPolicy and ErrAccessDenied (the CLI exits 77, not
// 69 as for a server out of reach).
func TestEvictionRefuseWithoutConfigIsAccessDenied(t *testing.T) {
	srv := testserver.Redis(t, testserver.WithRedisACL(
		"user default off",
		"user app on >app-pw "+testserver.RedisLockACL("distlock:"),
	))
	l, err := distlock.Open(t.Context(), "redis://app:app-pw@"+srv.Addr()+"/?eviction=refuse")
	if err == nil {
		_ = l.Close()
		t.Skip("Open succeeded")
	}
	if !errors.Is(err, distlock.ErrAccessDenied) {
		t.Errorf("Open with eviction=refuse and the documented ACL: %v\nwant an error matching ErrAccessDenied (the server refused CONFIG GET)", err)
	}
}
