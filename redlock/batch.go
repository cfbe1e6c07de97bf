package redlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	goredis "github.com/redis/go-redis/v9"
)

// RefreshBatch refreshes many leases with one pipeline per node
// (driver.Backend.RefreshBatch): each node runs the same repairing extend as
// Refresh for every lease, and each lease is then judged as Refresh judges
// it: once a quorum of nodes answered, and after the rest (up to the node
// timeout) only if some lease's verdict may depend on them. Waiting for a
// paused node on every batch would cost the leases whose validity is short.
func (b *backend) RefreshBatch(ctx context.Context, batch []driver.Refresh) error {
	n := len(b.nodes)
	start := time.Now()
	leases, nt := b.batchLeases(batch, start)
	if len(leases) == 0 {
		return nil
	}
	calls := newExtendBatch(batch, leases) // built once, sent to every node
	perNode := make([]batchAnswers, n)
	ch, dones := b.fanOutTracked(ctx, b.all(), nt, extendBatchOn(calls, leases, perNode), nil)
	for _, l := range leases {
		l.h.mu.Lock()
		l.h.calls = dones
		l.h.mu.Unlock()
	}
	all := gather(ctx, ch, n, b.quorum, deadline(nt))
	v := newBatchViews(n, perNode, &all)
	if all.ctxErr == nil && all.silent > 0 && b.silentMayDecide(leases, v) {
		// A silent node may yet say the lock vanished there.
		all.rest(ctx, ch, n, deadline(nt))
	}
	if all.ctxErr != nil {
		for _, l := range leases {
			batch[l.k].Err = all.ctxErr
		}
		return nil
	}
	for j, l := range leases {
		results, t := v.of(j)
		r := batch[l.k]
		batch[l.k].Validity, batch[l.k].Err = b.refreshVerdict(ctx, r.Grant, r.TTL, nt, l.h, l.before, results, t)
	}
	return nil
}

// batchLease is one lease of a RefreshBatch that this backend granted.
type batchLease struct {
	k      int // index in batch
	h      *handle
	seq    uint64
	before []time.Time
	valid  time.Time
	nonce  string
}

// batchLeases picks the leases of batch that this backend granted, setting
// the error of the others, and starts each one's refresh as Refresh does:
// a new sequence number, and what its handle knew before this call. nt is
// the longest node timeout of their TTLs: one fan-out serves them all.
func (b *backend) batchLeases(batch []driver.Refresh, start time.Time) ([]batchLease, time.Duration) {
	var leases []batchLease
	var nt time.Duration
	for k, r := range batch {
		h, ok := r.Grant.Handle.(*handle)
		if !ok {
			batch[k].Err = fmt.Errorf("%w: redlock: the grant was not made by this backend", distlock.ErrInvalidOption)
			continue
		}
		h.mu.Lock()
		before := slices.Clone(h.ours) // what was known before this call
		h.seq++
		seq := h.seq
		h.mu.Unlock()
		leases = append(leases, batchLease{k: k, h: h, seq: seq, before: before,
			valid: start.Add(r.TTL - r.Grant.Drift.For(r.TTL)), nonce: newNonce()})
		nt = max(nt, b.timeout(r.TTL))
	}
	return leases, nt
}

// newExtendBatch builds the pipeline every node runs: for each lease, the
// extend Refresh would send.
func newExtendBatch(batch []driver.Refresh, leases []batchLease) *redisnode.ExtendBatch {
	extends := make([]redisnode.Extend, len(leases))
	for j, l := range leases {
		r := batch[l.k]
		extends[j] = redisnode.Extend{Keys: l.h.keys, Owner: r.Grant.Owner, TTL: r.TTL, Token: distlock.Token(r.Grant.Token), Nonce: l.nonce,
			Value: l.h.value, Seq: l.seq}
	}
	return redisnode.NewExtendBatch(extends)
}

// batchAnswers is what one node said to each lease of a batch.
type batchAnswers struct {
	res  []redisnode.Extended
	errs []error
}

// extendBatchOn is RefreshBatch's call on one node. Each lease's handle
// learns the node's answer before the reply is counted, as in Refresh, and
// the answers go to perNode[i] before the reply is sent. The node counts
// as answered when any lease's extend got through.
func extendBatchOn(calls *redisnode.ExtendBatch, leases []batchLease, perNode []batchAnswers) func(context.Context, int, goredis.UniversalClient) (bool, error) {
	return func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
		res, errs := calls.On(ctx, c)
		for j, l := range leases { // learned before the reply is counted
			switch {
			case errs[j] != nil:
			case res[j] != redisnode.ExtendHeldByOther:
				l.h.learn(i, l.seq, l.valid)
			default:
				l.h.learn(i, l.seq, time.Time{})
			}
		}
		perNode[i] = batchAnswers{res: res, errs: errs}
		for _, err := range errs {
			if err == nil {
				return true, nil // the node answered
			}
		}
		return false, errs[0] // nothing got through: a failed node
	}
}

// silentMayDecide tells whether the nodes not yet heard from could decide
// some lease's verdict, as in Refresh: the lease is unbroken on too few of
// the nodes that answered, but on enough once the silent ones count.
func (b *backend) silentMayDecide(leases []batchLease, v *batchViews) bool {
	for j, l := range leases {
		results, t := v.of(j)
		if a, sl := unbroken(l.before, results, t); a < b.quorum && a+sl >= b.quorum {
			return true
		}
	}
	return false
}

// batchViews gives, lease by lease, what one lease knows from the nodes
// that answered so far (all, read at each call): the results and tally
// Refresh would have. One tally and one results slice serve every lease in
// turn, since a view per lease would cost some 15 allocations per lease
// and renewal: each view is read, and let go, before the next is made.
type batchViews struct {
	all     *tally
	perNode []batchAnswers
	results []redisnode.Extended
	t       tally
}

func newBatchViews(n int, perNode []batchAnswers, all *tally) *batchViews {
	return &batchViews{all: all, perNode: perNode, results: make([]redisnode.Extended, n), t: newTally(n, nil)}
}

// of is lease j's view; it is valid until the next call.
func (v *batchViews) of(j int) ([]redisnode.Extended, tally) {
	clear(v.results)
	v.t.yes, v.t.no = v.t.yes[:0], v.t.no[:0]
	clear(v.t.failed)
	clear(v.t.answered)
	v.t.silent = v.all.silent
	for i := range v.all.answered {
		a := v.perNode[i]
		v.results[i] = a.res[j]
		v.t.add(reply{i: i, ok: a.errs[j] == nil && a.res[j] != redisnode.ExtendHeldByOther, err: a.errs[j]})
	}
	return v.results, v.t
}
