package distlock

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// renewer keeps a Locker's auto-renewing leases refreshed: one goroutine
// for all of them, a queue ordered by when each falls due, and refreshes
// that run in parallel (at most maxRenewing calls at once) or, where the
// backend can (Backend.RefreshBatch), as batches of one round trip each.
// Due times are rounded down to a grid of a quarter of the interval, so
// leases due close together are renewed together (a little early) and,
// completing together, stay in step.
type renewer struct {
	l       *locker
	noBatch atomic.Bool    // the backend declined a batch: refresh one by one
	wake    chan struct{}  // the head of the queue changed
	slots   chan struct{}  // one per refresh call in flight
	mu      sync.Mutex     // guards queue and the leases' renewAt, renewIdx
	queue   renewQueue     // by renewAt
	calls   sync.WaitGroup // refresh calls in flight
}

const (
	maxRenewing  = 64  // refresh calls in flight at once, per Locker
	maxBatch     = 256 // grants per RefreshBatch call
	busyRetry    = 5 * time.Millisecond
	renewGridDiv = 4 // due times are rounded down to interval/renewGridDiv
)

func newRenewer(l *locker) *renewer {
	return &renewer{l: l, wake: make(chan struct{}, 1), slots: make(chan struct{}, maxRenewing)}
}

// schedule queues ls to be refreshed after d, or moves it earlier if it is
// queued for later.
func (r *renewer) schedule(ls *Lease, d time.Duration) {
	at := now().Add(d)
	if grid := d / renewGridDiv; grid > time.Millisecond {
		// Not Truncate: it drops the monotonic reading, and a wall clock
		// stepped back would then delay every renewal.
		at = at.Add(-time.Duration(at.UnixNano() % int64(grid)))
	}
	r.mu.Lock()
	head := len(r.queue) == 0 || at.Before(r.queue[0].renewAt)
	switch {
	case ls.renewIdx < 0:
		ls.renewAt = at
		heap.Push(&r.queue, ls)
	case at.Before(ls.renewAt):
		ls.renewAt = at
		heap.Fix(&r.queue, ls.renewIdx)
	default:
		head = false
	}
	r.mu.Unlock()
	if head {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// pullIn moves ls earlier in the queue, to at most d from now, if it is
// queued (a refresh in flight queues it again when it completes).
func (r *renewer) pullIn(ls *Lease, d time.Duration) {
	r.mu.Lock()
	queued := ls.renewIdx >= 0
	r.mu.Unlock()
	if queued {
		r.schedule(ls, d)
	}
}

// run is the renewer's goroutine; it ends when the Locker closes, after
// the refresh calls it started.
func (r *renewer) run() {
	defer r.l.wg.Done()
	defer r.calls.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		t := now()
		wait := time.Hour
		var due []*Lease
		r.mu.Lock()
		for len(r.queue) > 0 {
			head := r.queue[0]
			if d := head.renewAt.Sub(t); d > 0 {
				wait = d
				break
			}
			heap.Pop(&r.queue)
			due = append(due, head)
		}
		r.mu.Unlock()
		if len(due) > 0 {
			if !r.refresh(due) {
				return
			}
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-r.wake:
		case <-r.l.life.Done():
			return
		}
	}
}

// refresh starts the refresh calls of the leases due; false once the
// Locker has closed.
func (r *renewer) refresh(due []*Lease) bool {
	live := due[:0]
	for _, ls := range due {
		// A lease Release was asked for is not renewed, even if the release
		// fails: the key then frees at its TTL.
		if ls.Err() == nil && !ls.released.Load() {
			live = append(live, ls)
		}
	}
	batches := !r.noBatch.Load()
	for len(live) > 0 {
		n := 1
		if batches {
			n = min(len(live), maxBatch)
		}
		part := live[:n:n]
		live = live[n:]
		select {
		case r.slots <- struct{}{}:
		case <-r.l.life.Done():
			return false
		}
		r.calls.Add(1)
		go func() {
			defer func() { <-r.slots; r.calls.Done() }()
			if n == 1 {
				r.refreshOne(part[0])
				return
			}
			r.refreshBatch(part)
		}()
	}
	return true
}

func (r *renewer) refreshOne(ls *Lease) {
	ctx, cancel := context.WithDeadline(r.l.life, ls.Expires())
	err := ls.refresh(ctx, 0) // the TTL as it is once the call is ours
	cancel()
	r.done(ls, err)
}

// refreshBatch refreshes part in one backend call; a lease busy with a
// call of its own (Release, Refresh) is left for a moment later.
func (r *renewer) refreshBatch(part []*Lease) {
	leases := make([]*Lease, 0, len(part))
	batch := make([]driver.Refresh, 0, len(part))
	starts := make([]time.Time, 0, len(part))
	var deadline time.Time
	for _, ls := range part {
		if !ls.tryLockCall() {
			r.schedule(ls, busyRetry)
			continue
		}
		start, err := ls.refreshStart()
		if err != nil {
			ls.unlockCall()
			continue // ended
		}
		if exp := ls.Expires(); deadline.IsZero() || exp.Before(deadline) {
			deadline = exp
		}
		ttl := ls.TTL()
		ls.mayHaveShortened(start, ttl) // as refresh does: from the send on
		leases = append(leases, ls)
		starts = append(starts, start)
		batch = append(batch, driver.Refresh{Grant: ls.grant, TTL: ttl})
	}
	if len(batch) == 0 {
		return
	}
	// Bound by the nearest deadline: a refresh confirmed after it is
	// worthless for that lease, and the others are retried soon.
	ctx, cancel := context.WithDeadline(r.l.life, deadline)
	err := r.l.b.RefreshBatch(ctx, batch)
	if errors.Is(err, driver.ErrUnsupported) {
		// One by one from now on, each in its own call: in one goroutine a
		// stalled lease would hold up the rest.
		cancel()
		r.noBatch.Store(true)
		for _, ls := range leases {
			ls.unlockCall()
			r.schedule(ls, 0)
		}
		return
	}
	for i, ls := range leases {
		e := batch[i].Err
		if err != nil {
			e = err
		}
		e = ls.refreshDone(ctx, starts[i], batch[i].TTL, batch[i].Validity, e)
		ls.unlockCall()
		r.done(ls, e)
	}
	cancel()
}

// done queues ls again after a refresh: at its interval, or sooner after a
// failure, so a transient error does not cost the lease.
func (r *renewer) done(ls *Lease, err error) {
	if ls.Err() != nil || ls.released.Load() {
		return
	}
	next := ls.nextRenew()
	if err != nil {
		ls.l.log(slog.LevelWarn, "refresh failed; retrying", ls.Key(), err)
		next = min(next/4+jitter(next/4), max(time.Until(ls.Expires())/2, time.Millisecond))
	}
	r.schedule(ls, next)
}

// renewQueue is a heap of leases by renewAt; renewer.mu guards it.
type renewQueue []*Lease

func (q renewQueue) Len() int           { return len(q) }
func (q renewQueue) Less(i, j int) bool { return q[i].renewAt.Before(q[j].renewAt) }
func (q renewQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].renewIdx, q[j].renewIdx = i, j
}
func (q *renewQueue) Push(x any) {
	ls := x.(*Lease)
	ls.renewIdx = len(*q)
	*q = append(*q, ls)
}
func (q *renewQueue) Pop() any {
	old := *q
	ls := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	ls.renewIdx = -1
	return ls
}
