// Command misplaced must not compile: each call below passes an option
// where it does not apply, and the compiler, not a run-time check, refuses
// it (TestMisplacedOptionsDoNotCompile).
package main

import (
	"context"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	"github.com/distlock/distlock/redis"
)

func main() {
	ctx := context.Background()
	l, _ := memory.New()
	// A Locker-wide option passed to a single call.
	lease, _ := l.Acquire(ctx, "k", distlock.WithLogger(nil)) // want: Locker-wide
	// An option Refresh cannot apply: a lease's value is fixed when it is acquired.
	_ = lease.Refresh(ctx, distlock.WithValue("v")) // want: not for Refresh
	// A backend's option passed to a single call.
	_, _ = l.TryAcquire(ctx, "k", redis.WithKeyPrefix("app:")) // want: backend's
}
