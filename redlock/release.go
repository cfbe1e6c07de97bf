package redlock

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

// settle waits, up to the node timeout, for the node calls of h's last
// refresh, so that a repairing call cannot land after a release.
func (h *handle) settle(ctx context.Context, nt time.Duration) {
	h.mu.Lock()
	calls := h.calls
	h.calls = nil
	h.mu.Unlock()
	if len(calls) == 0 {
		return
	}
	timer := time.NewTimer(nt)
	defer timer.Stop()
	for _, done := range calls {
		select {
		case <-done:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (b *backend) Unlock(ctx context.Context, g driver.Grant) error {
	k := redisnode.KeysFor(b.prefix, g.Key)
	ttl := g.TTL
	if ttl <= 0 {
		ttl = distlock.DefaultTTL
	}
	nt := b.timeout(ttl)
	n := len(b.nodes)
	if h, ok := g.Handle.(*handle); ok {
		h.settle(ctx, nt)
	}
	// The tombstone keeps a straggling acquire or refresh of this lease
	// from setting the lock again after the release.
	tomb := redisnode.MaxLate
	if g.Handle == nil {
		tomb = redisnode.GiveBackTombstone(ttl)
	}
	release := redisnode.ReleaseCall(k, g.Owner, tomb, true)
	ch := b.fanOut(ctx, b.all(), nt, func(ctx context.Context, _ int, c goredis.UniversalClient) (bool, error) {
		return release.Release(ctx, c)
	})
	// Waits for every node (up to the node timeout), not just a quorum: a
	// TryAcquire right after Release must not find this lease's lock still
	// on a slower node.
	t := gather(ctx, ch, n, 0, deadline(nt))
	switch {
	case len(t.yes) >= b.quorum:
		return nil // freed on a majority: the rest follow or expire
	case g.Handle == nil && len(t.yes)+len(t.no) == n:
		// A give-back every node answered: each now has the tombstone, so
		// the attempt cannot land later anywhere; nothing to ask again.
		return nil
	case len(t.no) > n-b.quorum:
		return fmt.Errorf("redlock: %q: not ours on %d of %d nodes: %w", g.Key, len(t.no), n, distlock.ErrNotHeld)
	case len(t.yes) > 0 && len(t.yes)+len(t.no) >= b.quorum:
		// Released where it was ours, absent from the rest of a majority
		// (a lease held on a bare majority, one node of it silent): the
		// lock is off a majority, which is what a release needs.
		return nil
	case t.ctxErr != nil:
		return t.ctxErr
	}
	if err := b.refused(fmt.Sprintf("%q: release", g.Key), t); err != nil {
		return err
	}
	return fmt.Errorf("%w: %q: released on %d of %d nodes (need %d)%s",
		ErrNoQuorum, g.Key, len(t.yes), n, b.quorum, b.summary(t))
}
