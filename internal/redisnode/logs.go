package redisnode

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// go-redis logs through one process-wide logger (goredis.SetLogger), which
// writes to stderr by default. While a Locker owns clients it dialled itself
// (the redis:// and redlock:// openers), that logger is replaced by a router
// that sends each line to the loggers given with WithLogger to such Lockers,
// and drops it when none was given: nothing reaches stderr behind the
// caller's back. Clients a caller passes to New are the caller's, and so is
// go-redis's logger then.

var logs = struct {
	mu      sync.Mutex
	routed  bool
	loggers map[*slog.Logger]int
}{loggers: map[*slog.Logger]int{}}

// RouteLogs sends go-redis's log lines to l (nil: drops them) until the
// returned function is called.
func RouteLogs(l *slog.Logger) (stop func()) {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if !logs.routed {
		goredis.SetLogger(router{})
		logs.routed = true
	}
	if l == nil {
		return func() {}
	}
	logs.loggers[l]++
	var once sync.Once
	return func() {
		once.Do(func() {
			logs.mu.Lock()
			defer logs.mu.Unlock()
			if logs.loggers[l]--; logs.loggers[l] <= 0 {
				delete(logs.loggers, l)
			}
		})
	}
}

type router struct{}

func (router) Printf(ctx context.Context, format string, v ...any) {
	logs.mu.Lock()
	targets := make([]*slog.Logger, 0, len(logs.loggers))
	for l := range logs.loggers {
		targets = append(targets, l)
	}
	logs.mu.Unlock()
	if len(targets) == 0 {
		return
	}
	if ctx == nil {
		ctx = context.Background()
	}
	msg := fmt.Sprintf(format, v...)
	for _, l := range targets {
		l.LogAttrs(ctx, slog.LevelWarn, msg, slog.String("from", "go-redis"))
	}
}
