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
// (driver.BatchRefresher): each node runs the same repairing extend as
// Refresh for every lease, and each lease is then judged as Refresh judges
// it: once a quorum of nodes answered, and after the rest (up to the node
// timeout) only if some lease's verdict may depend on them. Waiting for a
// paused node on every batch would cost the leases whose validity is short.
func (b *backend) RefreshBatch(ctx context.Context, batch []driver.Refresh) error {
	n := len(b.nodes)
	type lease struct {
		k      int // index in batch
		h      *handle
		seq    uint64
		before []time.Time
		valid  time.Time
		nonce  string
	}
	start := time.Now()
	var leases []lease
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
		leases = append(leases, lease{k: k, h: h, seq: seq, before: before,
			valid: start.Add(r.TTL - r.Grant.Drift.For(r.TTL)), nonce: newNonce()})
		nt = max(nt, b.timeout(r.TTL))
	}
	if len(leases) == 0 {
		return nil
	}
	extends := make([]redisnode.Extend, len(leases))
	for j, l := range leases {
		r := batch[l.k]
		extends[j] = redisnode.Extend{Keys: l.h.keys, Owner: r.Grant.Owner, TTL: r.TTL, Token: r.Grant.Token, Nonce: l.nonce,
			Value: l.h.value, Seq: l.seq}
	}
	calls := redisnode.NewExtendBatch(extends) // built once, sent to every node

	// Each node's answers, written by its call before its reply is sent.
	type answers struct {
		res  []redisnode.Extended
		errs []error
	}
	perNode := make([]answers, n)
	ch, dones := b.fanOutTracked(ctx, b.all(), nt, func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
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
		perNode[i] = answers{res: res, errs: errs}
		for _, err := range errs {
			if err == nil {
				return true, nil // the node answered
			}
		}
		return false, errs[0] // nothing got through: a failed node
	}, nil)
	for _, l := range leases {
		l.h.mu.Lock()
		l.h.calls = dones
		l.h.mu.Unlock()
	}
	all := gather(ctx, ch, n, b.quorum, deadline(nt))
	// What lease j knows from the nodes that answered so far. One tally and
	// one results slice serve every lease in turn (10,000 leases made 15
	// allocations each per renewal): each view is read, and let go, before
	// the next is made.
	results := make([]redisnode.Extended, n)
	t := newTally(n, nil)
	view := func(j int) ([]redisnode.Extended, tally) {
		clear(results)
		t.yes, t.no = t.yes[:0], t.no[:0]
		clear(t.failed)
		clear(t.answered)
		t.silent = all.silent
		for i := range all.answered {
			a := perNode[i]
			results[i] = a.res[j]
			t.add(reply{i: i, ok: a.errs[j] == nil && a.res[j] != redisnode.ExtendHeldByOther, err: a.errs[j]})
		}
		return results, t
	}
	if all.ctxErr == nil && all.silent > 0 {
		for j, l := range leases {
			results, t := view(j)
			if a, sl := unbroken(l.before, results, t); a < b.quorum && a+sl >= b.quorum {
				// A silent node may yet say the lock vanished there.
				all.rest(ctx, ch, n, deadline(nt))
				break
			}
		}
	}
	if all.ctxErr != nil {
		for _, l := range leases {
			batch[l.k].Err = all.ctxErr
		}
		return nil
	}
	for j, l := range leases {
		results, t := view(j)
		r := batch[l.k]
		batch[l.k].Validity, batch[l.k].Err = b.refreshVerdict(ctx, r.Grant, r.TTL, nt, l.h, l.before, results, t)
	}
	return nil
}
