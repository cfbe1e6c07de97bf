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
// it. Unlike Refresh it waits for every node (up to the node timeout)
// instead of stopping at a quorum: a batch is background work, and every
// answer is then known before a verdict.
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
	calls := make([]redisnode.Extend, len(leases))
	for j, l := range leases {
		r := batch[l.k]
		calls[j] = redisnode.Extend{Keys: l.h.keys, Owner: r.Grant.Owner, TTL: r.TTL, Token: r.Grant.Token, Nonce: l.nonce}
	}

	// Each node's answers, written by its call before its reply is sent.
	type answers struct {
		res  []redisnode.Extended
		errs []error
	}
	perNode := make([]answers, n)
	ch, dones := b.fanOut(ctx, b.all(), nt, func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
		res, errs := redisnode.ExtendManyOn(ctx, c, calls)
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
		return true, nil
	}, nil)
	for _, l := range leases {
		l.h.mu.Lock()
		l.h.calls = dones
		l.h.mu.Unlock()
	}
	all := gather(ctx, ch, n, 0, deadline(nt)) // every node, not a quorum
	if all.ctxErr != nil {
		for _, l := range leases {
			batch[l.k].Err = all.ctxErr
		}
		return nil
	}
	for j, l := range leases {
		t := tally{failed: map[int]error{}, answered: map[int]bool{}, silent: all.silent}
		results := make([]redisnode.Extended, n)
		for i := range all.answered {
			a := perNode[i]
			results[i] = a.res[j]
			t.add(reply{i: i, ok: a.errs[j] == nil && a.res[j] != redisnode.ExtendHeldByOther, err: a.errs[j]})
		}
		r := batch[l.k]
		batch[l.k].Validity, batch[l.k].Err = b.refreshVerdict(ctx, r.Grant, r.TTL, nt, l.h, l.before, results, t)
	}
	return nil
}
