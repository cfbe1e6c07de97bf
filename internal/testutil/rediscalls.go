package testutil

import (
	"context"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// RedisCalls is a go-redis hook counting a client's round trips: single
// commands and pipelines.
type RedisCalls struct{ Singles, Pipelines atomic.Int64 }

// DialHook implements goredis.Hook.
func (h *RedisCalls) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook.
func (h *RedisCalls) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.Singles.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook.
func (h *RedisCalls) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.Pipelines.Add(1)
		return next(ctx, cmds)
	}
}
