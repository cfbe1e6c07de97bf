package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"github.com/distlock/distlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryPause separates re-reads of the queue while a waiter's server
// connection is failing.
const retryPause = 100 * time.Millisecond

// readTimeout bounds each read of a waiter's place: far above a read's
// round trip, short enough that one sent to a member that hangs is soon
// given up and tried again (a new pick of the balancer).
const readTimeout = 2 * time.Second

// renewRetry is the pause before a waiter's failed renewal, or failed
// re-read of its place, is tried again.
const renewRetry = 50 * time.Millisecond

// rereadEvery is how often a waiter reads its place in the queue even though
// its watch said nothing: a watch whose member hangs with its connection open
// hears nothing, and its waiter, first in the queue once its predecessor
// goes, would hold the lock without knowing, until its context ended.
const rereadEvery = 5 * time.Second

// syncChecks are when, after its watch is made, a waiter re-reads the queue
// in case etcd left that watch to its 100 ms catch-up loop (see recheck): the
// first always, the others only while the store keeps moving.
var syncChecks = []time.Duration{5 * time.Millisecond, 25 * time.Millisecond, 60 * time.Millisecond}

// Lock joins key's queue and waits for its predecessor to go.
func (b *backend) Lock(ctx context.Context, req driver.Request) (_ driver.Grant, err error) {
	defer b.denied(&err)
	l, err := b.takeLease(ctx, req.TTL)
	if err != nil {
		return driver.Grant{}, err
	}
	q := b.queue(req.Key)
	me := b.keyName(q, req.Owner)
	h := b.newHandle(q, me)
	g, err := b.lock(ctx, req, q, h, l)
	if err != nil {
		h.end()
	}
	return g, err
}

// lock is Lock once the attempt's handle is made; h ends if it fails.
func (b *backend) lock(ctx context.Context, req driver.Request, q string, h *handle, l *lease) (driver.Grant, error) {
	me := h.key
	start := time.Now()
	// One round trip: create our key and read our predecessor (the two
	// newest keys are us and it). With none, nobody was queued before us:
	// the lock is ours.
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpPut(me, req.Value, clientv3.WithLease(l.id)),
		clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(2),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)),
	).Commit()
	if err != nil {
		b.abandon(ctx, q, me, l, err)
		return driver.Grant{}, fmt.Errorf("etcd: joining the queue of %q: %w", req.Key, err)
	}
	rev := resp.Header.Revision
	newest := resp.Responses[1].GetResponseRange().GetKvs()
	if len(newest) == 0 || string(newest[0].Key) != me {
		err := fmt.Errorf("etcd: queue of %q read back without our key", req.Key)
		b.abandon(ctx, q, me, l, rpctypes.ErrLeaseNotFound) // do not trust the lease
		return driver.Grant{}, err
	}
	if len(newest) == 1 {
		return b.grant(req, h, rev, l, start), nil
	}
	pos := position{pred: string(newest[1].Key), from: rev + 1}
	g, err := b.wait(ctx, req, q, h, rev, l, pos)
	if err != nil {
		if !errors.Is(err, errKeyGone) {
			b.abandon(ctx, q, me, l, err)
		}
		return driver.Grant{}, err
	}
	return g, nil
}

// position is a waiter's place in the queue: whom it watches, from when.
type position struct {
	owner bool // we are first: the lock is ours
	pred  string
	from  int64 // first revision the watch must see
}

var errKeyGone = errors.New("etcd: our queue key disappeared while waiting (its lease expired or was revoked)")

// wait waits in the queue until we own the lock or ctx ends. It keeps the
// waiter's lease alive and follows its predecessors until none is left.
func (b *backend) wait(ctx context.Context, req driver.Request, q string, h *handle, rev int64, l *lease, pos position) (driver.Grant, error) {
	me := h.key
	gone, stop := b.keepWaiting(ctx, l)
	for {
		next, start, err := b.follow(ctx, q, me, rev, pos, gone)
		if err != nil {
			stop()
			return driver.Grant{}, err
		}
		if next.owner {
			stop() // before owned renews l itself
			return b.owned(ctx, req, h, rev, l, start)
		}
		pos = next
	}
}

// keepWaiting keeps a waiter's lease l alive until stop is called (which
// returns once it has stopped), from a goroutine of its own: a read or watch
// of the wait that hangs on a member that does must not hold the renewal
// up. gone closes if the server says the lease is gone.
func (b *backend) keepWaiting(ctx context.Context, l *lease) (gone <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	g, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		// Renew before a third of the lease has gone, or sooner if a
		// recycled lease has less left than that.
		t := time.NewTimer(min(l.period()/3, l.left(time.Now())/2))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := b.renewOnce(ctx, l)
			if leaseGone(err) {
				close(g)
				return
			}
			next := l.period() / 3
			if err != nil {
				// At once, nearly: a new try is a new pick of the
				// balancer, which may have sent this one to a member
				// that hangs.
				next = min(next, renewRetry)
			}
			t.Reset(next)
		}
	}()
	return g, func() { cancel(); <-done }
}

// follow watches pos.pred, and only it, until it goes, and returns our next
// position and when it was learnt (the start of the confirming round
// trip). gone closes if our lease is gone. Every read is bounded
// (readTimeout): the balancer may send it to a member that hangs.
func (b *backend) follow(ctx context.Context, q, me string, rev int64, pos position, gone <-chan struct{}) (position, time.Time, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Watch from the store's current revision, not from pos.from: etcd
	// serves a watch that starts in the past from its catch-up loop, which
	// runs every 100 ms, while one that starts now hears a change at once.
	// The Created header says where it starts; a re-read covers the gap.
	wch := b.cli.Watch(wctx, pos.pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	f := &following{b: b, q: q, me: me, rev: rev, pos: pos}
	f.check = time.NewTimer(time.Hour)
	f.check.Stop()
	defer f.check.Stop()
	f.reread = time.NewTimer(rereadEvery)
	defer f.reread.Stop()
	for {
		select {
		case <-ctx.Done():
			return position{}, time.Time{}, ctx.Err()
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				// Broken (ctx, compaction, no leader…): re-read the queue.
				return b.reposition(ctx, q, me, rev)
			}
			if next, start, done, err := f.heard(ctx, wr); done {
				return next, start, err
			}
		case <-f.check.C:
			if next, start, done, err := f.recheck(ctx); done {
				return next, start, err
			}
		case <-f.reread.C:
			if next, start, done, err := f.periodic(ctx); done {
				return next, start, err
			}
		case <-gone:
			return position{}, time.Time{}, errKeyGone
		}
	}
}

// following is the state one follow carries between its steps: where the
// waiter stands, what its watch's Created header said, and the timers of
// its re-reads. Each step returns done when follow must return its other
// results: the position changed, or a read failed for good.
type following struct {
	b   *backend
	q   string
	me  string
	rev int64
	pos position

	created time.Time // when the watch was confirmed
	hdr     int64     // it hears every revision after hdr
	checks  int       // re-reads made since

	check  *time.Timer // the next of syncChecks; stopped until the watch exists
	reread *time.Timer // the next rereadEvery read
}

// heard handles one healthy response of the watch: its confirmation, which
// starts the re-reads that cover the gap before the watch, or a delete of
// the predecessor, after which our place is read again.
func (f *following) heard(ctx context.Context, wr clientv3.WatchResponse) (position, time.Time, bool, error) {
	if wr.Created {
		f.created, f.hdr = time.Now(), wr.Header.Revision
		if f.hdr >= f.pos.from {
			// The store moved on since we read the queue.
			if next, start, done, err := f.recheck(ctx); done {
				return next, start, done, err
			}
		} else {
			f.check.Reset(syncChecks[0])
		}
	}
	for _, ev := range wr.Events {
		if ev.Type != mvccpb.DELETE {
			continue
		}
		// Read our place even when the predecessor was the owner: our own
		// key may have been deleted meanwhile (an operator, a revoke of our
		// lease), and the waiter behind us, which then followed that owner
		// too, takes the lock.
		next, start, err := f.b.reposition(ctx, f.q, f.me, f.rev)
		return next, start, true, err
	}
	return position{}, time.Time{}, false, nil
}

// recheck re-reads the queue once the watch exists: a predecessor still
// there then is deleted later, at a revision the watch hears.
//
// etcd reads the header's revision before it registers a watch, so a write
// landing in between leaves the watch in the catch-up loop while its header
// claims it is current. A read at revision hdr proves that did not happen;
// while reads show later revisions, a few more, spread over the loop's
// 100 ms, bound the delay a raced watch could cause.
func (f *following) recheck(ctx context.Context) (next position, start time.Time, done bool, err error) {
	f.checks++
	start = time.Now()
	next, err = f.b.boundedPosition(ctx, f.q, f.me, f.rev)
	switch {
	case errors.Is(err, errKeyGone):
		return position{}, time.Time{}, true, err
	case err != nil:
		// The gap may not be covered: read until it is.
		next, start, err = f.b.reposition(ctx, f.q, f.me, f.rev)
		return next, start, true, err
	case next.owner || next.pred != f.pos.pred:
		return next, start, true, nil
	}
	if next.from-1 > f.hdr && f.checks < len(syncChecks) {
		f.check.Reset(time.Until(f.created.Add(syncChecks[f.checks])))
	}
	return position{}, time.Time{}, false, nil
}

// periodic is the read of our place every rereadEvery, whatever the watch
// says: a watch whose member hangs with its connection open hears nothing.
func (f *following) periodic(ctx context.Context) (position, time.Time, bool, error) {
	start := time.Now()
	next, err := f.b.boundedPosition(ctx, f.q, f.me, f.rev)
	switch {
	case errors.Is(err, errKeyGone):
		return position{}, time.Time{}, true, err
	case err != nil:
		// A hung or lost member: again at once, nearly (a new pick of the
		// balancer).
		f.reread.Reset(renewRetry)
		return position{}, time.Time{}, false, nil
	case next.owner || next.pred != f.pos.pred:
		return next, start, true, nil
	}
	f.reread.Reset(rereadEvery)
	return position{}, time.Time{}, false, nil
}

// reposition re-reads our position, pausing and trying again while the
// connection fails (an election, a member going away) until ctx ends.
func (b *backend) reposition(ctx context.Context, q, me string, rev int64) (position, time.Time, error) {
	for {
		start := time.Now()
		pos, err := b.boundedPosition(ctx, q, me, rev)
		if err == nil {
			return pos, start, nil
		}
		if errors.Is(err, errKeyGone) {
			return position{}, time.Time{}, err
		}
		if cerr := ctx.Err(); cerr != nil {
			return position{}, time.Time{}, cerr
		}
		if err := clock.Sleep(ctx, retryPause); err != nil {
			return position{}, time.Time{}, err
		}
	}
}

// owned finishes a wait that made us the owner: it makes sure the lease has a
// fair share of its TTL left (renewing it if not) and builds the grant.
//
// Each renewal is bounded and tried again at once, up to ownedRenewals
// times: a new KeepAliveOnce is a new pick of the balancer, which may have
// sent the last one to a member that hangs. A lease that still has time
// left is granted with it, however short.
func (b *backend) owned(ctx context.Context, req driver.Request, h *handle, rev int64, l *lease, start time.Time) (driver.Grant, error) {
	var err error
	for range ownedRenewals {
		if l.left(start) >= req.TTL/2 || ctx.Err() != nil {
			break
		}
		now := time.Now()
		if err = b.renewOnce(ctx, l); err == nil {
			start = now
			break
		}
		if leaseGone(err) {
			return driver.Grant{}, errKeyGone
		}
	}
	if l.left(start) <= 0 {
		if err == nil {
			err = ctx.Err() // no try was made
		}
		return driver.Grant{}, fmt.Errorf("etcd: confirming the lease of %q: %w", req.Key, err)
	}
	return b.grant(req, h, rev, l, start), nil
}

// ownedRenewals is how many times owned tries to renew a lease that has
// less than half its TTL left.
const ownedRenewals = 3

// renewOnce renews l once, within a sixth of its period (at most
// checkTimeout): short enough that a try sent to a member that hangs leaves
// time for more before the lease runs out.
func (b *backend) renewOnce(ctx context.Context, l *lease) error {
	ctx, cancel := context.WithTimeout(ctx, min(l.period()/6, checkTimeout))
	defer cancel()
	return b.keepAlive(ctx, l)
}

// hedgeAfter is how long a read of a waiter's place may go unanswered
// before the same read is sent again, up to hedgeReads in all: each is a
// new pick of the balancer, so one sent to a member that hangs does not
// hold a hand-off up for readTimeout. A healthy read answers in a few
// milliseconds, so the copies are rare.
const (
	hedgeAfter = 100 * time.Millisecond
	hedgeReads = 3
)

// boundedPosition is position within readTimeout, hedged: the balancer may
// send a read to a member that hangs. The first answer wins; it fails
// when every read sent so far has failed.
func (b *backend) boundedPosition(ctx context.Context, q, me string, rev int64) (position, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	type answer struct {
		pos position
		err error
	}
	answers := make(chan answer, hedgeReads)
	send := func() {
		go func() {
			pos, err := b.position(ctx, q, me, rev)
			answers <- answer{pos, err}
		}()
	}
	send()
	sent, heard := 1, 0
	hedge := time.NewTimer(hedgeAfter)
	defer hedge.Stop()
	defer func() { // the reads still out end with ctx: wait for them
		cancel()
		for ; heard < sent; heard++ {
			<-answers
		}
	}()
	for {
		select {
		case a := <-answers:
			heard++
			if a.err == nil || errors.Is(a.err, errKeyGone) {
				return a.pos, a.err
			}
			if heard == sent { // the callers pause before they try again
				return position{}, a.err
			}
		case <-hedge.C:
			if sent < hedgeReads && ctx.Err() == nil {
				send()
				sent++
				hedge.Reset(hedgeAfter)
			}
		}
	}
}

// position reads where our key stands in the queue, in one round trip that
// also checks the key still exists: our predecessor is the newest key
// created before ours, and with none we own the lock.
func (b *backend) position(ctx context.Context, q, me string, rev int64) (position, error) {
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(me), "=", rev)).
		Then(
			clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
				clientv3.WithMaxCreateRev(rev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)),
		).Commit()
	if err != nil {
		return position{}, err
	}
	if !resp.Succeeded {
		return position{}, errKeyGone
	}
	from := resp.Header.Revision + 1
	pred := resp.Responses[0].GetResponseRange().GetKvs()
	if len(pred) == 0 {
		return position{owner: true, from: from}, nil
	}
	return position{pred: string(pred[0].Key), from: from}, nil
}

// abandon removes a key whose acquire failed (with cause) or was cancelled,
// on a context of its own since ctx may be over. If that fails too, the lease
// is dropped and takes the key with it when it expires.
func (b *backend) abandon(ctx context.Context, q, me string, l *lease, cause error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	// Recycle the lease only if the key was there to delete: if it was not,
	// a lost Put may still be on its way. Revoking the lease, ours alone,
	// deletes such a key and refuses the Put if it lands later; if even
	// that fails, the key goes when the lease expires.
	resp, err := b.cli.Delete(cctx, me)
	if err == nil && resp.Deleted == 1 && !leaseGone(cause) {
		b.freeName(q, me)
		b.putSpare(l)
		return
	}
	_, _ = b.cli.Revoke(cctx, l.id)
}
