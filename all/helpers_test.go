package all_test

import (
	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redis"
)

func redisPrefix() distlock.Option { return redis.WithKeyPrefix("x:") }
