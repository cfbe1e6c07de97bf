package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	h, ok := g.Handle.(*handle)
	if !ok {
		return 0, fmt.Errorf("%w: redlock: the grant was not made by this backend", distlock.ErrInvalidOption)
	}
	start := time.Now()
	nt := b.timeout(ttl)
	n := len(b.nodes)
	valid := start.Add(ttl - g.Drift.For(ttl))
	nonce := newNonce()
	h.mu.Lock()
	before := slices.Clone(h.ours) // what was known before this call
	h.seq++
	seq := h.seq
	h.mu.Unlock()
	results := make([]redisnode.Extended, n) // written before the reply is sent
	// Extend where the lock is ours, take it back where it is missing: a
	// lease that holds exactly a majority would otherwise die with any one
	// node of it, contrary to the failures Redlock tolerates. Every answer,
	// even one after the decision, updates what the handle knows.
	ch, dones := b.fanOutTracked(ctx, b.all(), nt, func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
		r, err := redisnode.ExtendOn(ctx, c, h.keys, g.Owner, ttl, distlock.Token(g.Token), nonce, h.value, seq)
		results[i] = r
		switch { // learned before the reply is counted
		case err != nil:
		case r != redisnode.ExtendHeldByOther:
			h.learn(i, seq, valid)
		default:
			h.learn(i, seq, time.Time{})
		}
		return r != redisnode.ExtendHeldByOther, err
	}, nil)
	h.mu.Lock()
	h.calls = dones
	h.mu.Unlock()
	t := gather(ctx, ch, n, b.quorum, deadline(nt))
	if t.ctxErr != nil {
		return 0, t.ctxErr
	}
	if a, sl := unbroken(before, results, t); a < b.quorum && a+sl >= b.quorum && t.silent > 0 {
		// A silent node may yet say the lock vanished there.
		t.rest(ctx, ch, n, deadline(nt))
		if t.ctxErr != nil {
			return 0, t.ctxErr
		}
	}
	return b.refreshVerdict(ctx, g, ttl, nt, h, before, results, t)
}

// unbroken counts the nodes where the lock has been ours since before the
// refresh and still is. A node that answered must have extended it; a
// silent one counts by the expiry known for it, but only once it had its
// chance to answer: its answer may say the lock vanished there.
func unbroken(before []time.Time, results []redisnode.Extended, t tally) (answered, silent int) {
	now := time.Now()
	for i := range before {
		_, failed := t.failed[i]
		switch {
		case !now.Before(before[i]):
		case failed || !t.answered[i]:
			silent++
		case results[i] == redisnode.ExtendRenewed:
			answered++
		}
	}
	return answered, silent
}

// refreshVerdict turns what the nodes said to a refresh into its outcome.
func (b *backend) refreshVerdict(ctx context.Context, g driver.Grant, ttl, nt time.Duration, h *handle,
	before []time.Time, results []redisnode.Extended, t tally) (time.Duration, error) {
	n := len(b.nodes)
	if a, sl := unbroken(before, results, t); a+sl < b.quorum {
		// The lock lapsed on so many nodes that a majority was free at some
		// moment: it may have had another holder since. Give back what this
		// refresh holds rather than carry on.
		for _, i := range t.yes {
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.releaseNode(ctx, i, h.keys, g.Owner, ttl, nt)
			}()
		}
		return 0, fmt.Errorf("redlock: %q: held without a break on %d of %d nodes (need %d), someone else's on %d: %w",
			g.Key, a+sl, n, b.quorum, len(t.no), distlock.ErrNotHeld)
	}
	if len(t.yes) < b.quorum {
		if err := b.refused(fmt.Sprintf("%q: refresh", g.Key), t); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: %q: refreshed on %d of %d nodes (need %d)%s",
			ErrNoQuorum, g.Key, len(t.yes), n, b.quorum, b.summary(t))
	}
	// Each node's new expiry was set after start.
	return ttl, nil
}

// newNonce returns a random value unique to one refresh.
func newNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
