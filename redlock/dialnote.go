package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// dialNote keeps a node client's last failed dial. go-redis redials a
// refused node until the call's deadline and then reports only the
// deadline; the note lets the error say why the node did not answer.
type dialNote struct {
	last atomic.Pointer[error] // nil after a dial that worked
}

// noteDials adds a dialNote to c's hooks.
func noteDials(c goredis.UniversalClient) *dialNote {
	d := &dialNote{}
	c.AddHook(d)
	return d
}

func (d *dialNote) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		c, err = next(ctx, network, addr)
		if err != nil {
			d.last.Store(&err)
		} else {
			d.last.Store(nil)
		}
		return c, err
	}
}

func (d *dialNote) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (d *dialNote) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// errNodeTimeout is a node's call cut off by the node timeout (or Open's
// dial timeout), not by the caller's ctx.
var errNodeTimeout = errors.New("no answer")

// explain replaces the deadline of a call bounded by our own timeout
// (within) with what is known of the cause, so that the error names it and
// does not match context.DeadlineExceeded while the caller's ctx is live.
func (d *dialNote) explain(err error, within time.Duration) error {
	if d == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if p := d.last.Load(); p != nil {
		return fmt.Errorf("%w within %v: %v", errNodeTimeout, within, *p)
	}
	return fmt.Errorf("%w within %v", errNodeTimeout, within)
}
