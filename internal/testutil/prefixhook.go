package testutil

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// KeyPrefixHook is a go-redis hook of the namespacing kind: it rewrites the
// keys of every EVAL/EVALSHA in the command's own words (Cmder.Args), in
// place, before it is sent, single or pipelined. A library that resends or
// shares a command's words sees them prefixed twice.
type KeyPrefixHook struct{ Prefix string }

// DialHook leaves dialling alone.
func (KeyPrefixHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook rewrites a single command's keys before it is sent.
func (h KeyPrefixHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.rewrite(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook rewrites the keys of every command of a pipeline.
func (h KeyPrefixHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			h.rewrite(c)
		}
		return next(ctx, cmds)
	}
}

func (h KeyPrefixHook) rewrite(cmd goredis.Cmder) {
	args := cmd.Args()
	if len(args) < 3 {
		return
	}
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "eval", "evalsha":
		n, _ := strconv.Atoi(fmt.Sprint(args[2]))
		for i := 3; i < 3+n && i < len(args); i++ {
			args[i] = h.Prefix + fmt.Sprint(args[i])
		}
	}
}
