package redis

import (
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// The names Open hands to go-redis are ones go-redis reads: were one
// dropped from go-redis, Open would let it pass its own check and fail
// later with go-redis's message.
func TestGoRedisParamsAreGoRedis(t *testing.T) {
	for _, n := range goRedisParams {
		if _, err := goredis.ParseURL("redis://127.0.0.1:1?" + n + "=1"); err != nil && strings.Contains(err.Error(), "unexpected option") {
			t.Errorf("ParseURL does not read %s: %v", n, err)
		}
	}
	for _, n := range goRedisSentinelParams {
		raw := "redis://127.0.0.1:1?master_name=m&" + n + "=1"
		if _, err := goredis.ParseFailoverURL(raw); err != nil && strings.Contains(err.Error(), "unexpected option") {
			t.Errorf("ParseFailoverURL does not read %s: %v", n, err)
		}
	}
	if _, err := goredis.ParseURL("redis://127.0.0.1:1?bogus=1"); err == nil || !strings.Contains(err.Error(), "unexpected option") {
		t.Fatalf("go-redis no longer says \"unexpected option\" (%v): this test cannot fail", err)
	}
}
