package etcd

import (
	"context"
	"time"

	"github.com/distlock/distlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lossWatchDelay is how long a lock is held before its loss watch is made; a
// deletion in that time is reported once it is.
const lossWatchDelay = 100 * time.Millisecond

// markGone is the loss watch's report that the key was deleted.
func (h *handle) markGone() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gone = true
	if h.state == held {
		h.shutLost()
	}
}

// watchLoss starts h's loss watch from revision from; false if the backend
// is closed.
func (b *backend) watchLoss(h *handle, from int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	ctx, cancel := context.WithCancel(b.life)
	h.stopWatch = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer cancel()
		// Short holds never pay for a watch: it is made only once the lock
		// has been held a little while. Starting at from, it misses nothing
		// that happened meanwhile. (Watch also blocks for a round trip,
		// which this keeps off the acquire's path.)
		if driver.Sleep(ctx, lossWatchDelay) != nil {
			return
		}
		wch := b.cli.Watch(ctx, h.key, clientv3.WithRev(from), clientv3.WithFilterPut())
		for wr := range wch {
			if wr.Err() != nil {
				// Compacted or cancelled: Refresh still catches a loss.
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					h.markGone()
					return
				}
			}
		}
	}()
	return true
}
