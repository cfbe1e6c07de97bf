package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// reply is one node's answer: ok is the call's yes/no, err a failure to
// reach or use the node (a timeout included).
type reply struct {
	i   int
	ok  bool
	err error
}

// fanOut calls fn on each node of idx in parallel, each call bounded by nt
// (not by ctx), and returns the channel the replies arrive on (buffered: a
// straggler never blocks).
func (b *backend) fanOut(ctx context.Context, idx []int, nt time.Duration,
	fn func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error)) <-chan reply {
	ch, _ := b.fan(ctx, idx, nt, fn, nil, false)
	return ch
}

// fanOutTracked is fanOut that also returns one channel per node, closed
// when its goroutine is done: after then(reply) when then is not nil.
func (b *backend) fanOutTracked(ctx context.Context, idx []int, nt time.Duration,
	fn func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error), then func(reply)) (<-chan reply, map[int]chan struct{}) {
	return b.fan(ctx, idx, nt, fn, then, true)
}

func (b *backend) fan(ctx context.Context, idx []int, nt time.Duration,
	fn func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error), then func(reply), track bool) (<-chan reply, map[int]chan struct{}) {
	ch := make(chan reply, len(idx))
	var dones map[int]chan struct{}
	if track {
		dones = make(map[int]chan struct{}, len(idx))
	}
	// A call once sent runs to its answer or the node timeout even if the
	// caller stops waiting: its answer still updates what the attempt or
	// lease knows, and a release follows it. The calls start together, so
	// one deadline serves them all; the last call to end frees it.
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nt)
	var running atomic.Int32
	running.Store(int32(len(idx)))
	ended := func() {
		if running.Add(-1) <= 0 {
			cancel()
		}
	}
	if len(idx) == 0 {
		ended()
	}
	for _, i := range idx {
		var done chan struct{}
		if track {
			done = make(chan struct{})
			dones[i] = done
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			if done != nil {
				defer close(done)
			}
			ok, err := fn(nctx, i, b.nodes[i].client)
			ended()
			b.nodes[i].noteCall(err)
			r := reply{i: i, ok: ok, err: b.nodes[i].dials.explain(err, nt)}
			ch <- r
			if then != nil {
				then(r)
			}
		}()
	}
	return ch, dones
}

// tally is what gather collected.
type tally struct {
	yes, no  []int         // nodes that answered yes / no
	failed   map[int]error // nodes whose call failed (nil for none)
	answered map[int]bool  // every node that answered (yes, no or failed)
	silent   int           // nodes not heard from: no answer in time, or not waited for
	decided  bool          // read stopped once the answers in hand decided
	ctxErr   error         // ctx ended before a decision
	suspect  map[int]bool  // nodes not counted on to answer (gatherHopeful)
}

// newTally makes room for total answers at once (one allocation, not one
// per append).
func newTally(total int, suspects map[int]bool) tally {
	votes := make([]int, 0, 2*total)
	return tally{yes: votes[:0:total], no: votes[total:total], answered: make(map[int]bool, total), suspect: suspects}
}

// hopeful is how many of total nodes have not answered and are counted on
// to: suspects are not.
func (t *tally) hopeful(total int) int {
	h := total - len(t.answered)
	for i := range t.suspect {
		if !t.answered[i] {
			h--
		}
	}
	return h
}

func (t *tally) add(r reply) {
	t.answered[r.i] = true
	switch {
	case r.err != nil:
		if t.failed == nil {
			t.failed = map[int]error{}
		}
		t.failed[r.i] = r.err
	case r.ok:
		t.yes = append(t.yes, r.i)
	default:
		t.no = append(t.no, r.i)
	}
}

// gather reads up to total replies. With need > 0 it stops early once need
// nodes said yes, or once need yeses can no longer be reached. It stops
// anyway when all answered, ctx ended or the deadline passed (a backstop
// for clients whose calls ignore context deadlines).
func gather(ctx context.Context, ch <-chan reply, total, need int, deadline time.Time) tally {
	t := newTally(total, nil)
	t.read(ctx, ch, total, need, deadline)
	return t
}

// gatherHopeful is gather for phase 1: it also gives up once need yeses
// can no longer come from the nodes that are not suspects (see noteCall), so
// that a hung node's timeout does not decide every attempt it takes part
// in: contenders that each took some live nodes would fail together, one
// node timeout later, woken together by each other's give-backs, and split
// the live nodes again (a livelock). It waits for suspects as usual when
// the others alone cannot make need.
func gatherHopeful(ctx context.Context, ch <-chan reply, total, need int, deadline time.Time, suspects map[int]bool) tally {
	t := newTally(total, suspects)
	if total-len(suspects) < need {
		t.suspect = nil
	}
	t.read(ctx, ch, total, need, deadline)
	return t
}

// rest goes on reading replies until every node answered, ctx ended or
// the deadline passed.
func (t *tally) rest(ctx context.Context, ch <-chan reply, total int, deadline time.Time) {
	t.read(ctx, ch, total, 0, deadline)
}

func (t *tally) read(ctx context.Context, ch <-chan reply, total, need int, deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for len(t.answered) < total {
		if need > 0 && (len(t.yes) >= need || len(t.yes)+t.hopeful(total) < need) {
			t.decided = true
			break
		}
		select {
		case r := <-ch:
			t.add(r)
			continue
		case <-ctx.Done():
			t.ctxErr = ctx.Err()
		case <-timer.C:
		}
		break
	}
	t.silent = total - len(t.answered)
}

// deadline is when gather stops waiting for calls bounded by nt.
func deadline(nt time.Duration) time.Time {
	return time.Now().Add(nt + max(nt/4, 2*time.Millisecond))
}

// summary describes the failed and silent nodes of t for an error message.
func (b *backend) summary(t tally) string {
	var parts []string
	for i := range b.nodes {
		if err, ok := t.failed[i]; ok {
			parts = append(parts, fmt.Sprintf("node %d: %v", i, err))
		}
	}
	switch {
	case t.silent > 0 && t.decided:
		parts = append(parts, fmt.Sprintf("%d node(s) not waited for: the others decided", t.silent))
	case t.silent > 0:
		parts = append(parts, fmt.Sprintf("%d node(s) not heard from in time", t.silent))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// all lists every node's index; the slice is shared: do not change it.
func (b *backend) all() []int { return b.every }
