package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// maxSpares caps the recycled leases kept per TTL; extra ones are left
	// to expire on the server.
	maxSpares = 8
	// spareMargin is how much more than the TTL a recycled lease must have
	// left, so that the round trip using it still gets the full TTL.
	spareMargin = 100 * time.Millisecond
)

// lease is an etcd lease used by one lock (or one waiter) at a time.
type lease struct {
	id   clientv3.LeaseID
	secs int64 // seconds asked of the server: the recycling bucket

	mu    sync.Mutex
	ttl   time.Duration // as granted (or last renewed) by the server
	until time.Time     // start of the last call that confirmed it + ttl
}

func (l *lease) confirmed(start time.Time, ttlSecs int64) {
	l.mu.Lock()
	l.ttl = time.Duration(ttlSecs) * time.Second
	l.until = start.Add(l.ttl)
	l.mu.Unlock()
}

func (l *lease) left(at time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until.Sub(at)
}

func (l *lease) period() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// leaseSeconds is the TTL asked of etcd for ttl: whole seconds, rounded up,
// plus one second of headroom so a recycled lease can still cover ttl.
func leaseSeconds(ttl time.Duration) int64 {
	return int64(math.Ceil(ttl.Seconds())) + 1
}

// takeLease returns a lease that lasts at least ttl from now: a recycled one
// if possible (no round trip), else a new grant.
func (b *backend) takeLease(ctx context.Context, ttl time.Duration) (*lease, error) {
	secs := leaseSeconds(ttl)
	now := time.Now()
	b.mu.Lock()
	s := b.spares[secs]
	for len(s) > 0 {
		l := s[len(s)-1]
		s = s[:len(s)-1]
		if l.left(now) >= ttl+spareMargin {
			b.spares[secs] = s
			b.mu.Unlock()
			return l, nil
		}
		// Too close to its end: leave it to expire on the server.
	}
	b.spares[secs] = s
	b.mu.Unlock()

	start := time.Now()
	resp, err := b.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("etcd: granting a %ds lease: %w", secs, err)
	}
	l := &lease{id: resp.ID, secs: secs}
	l.confirmed(start, resp.TTL)
	return l, nil
}

// putSpare offers an unused, live lease for reuse.
func (b *backend) putSpare(l *lease) {
	if l.left(time.Now()) <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed && len(b.spares[l.secs]) < maxSpares {
		b.spares[l.secs] = append(b.spares[l.secs], l)
	}
}

// keepAlive renews l once and records the confirmation.
func (b *backend) keepAlive(ctx context.Context, l *lease) error {
	start := time.Now()
	resp, err := b.cli.KeepAliveOnce(ctx, l.id)
	if err != nil {
		return err
	}
	l.confirmed(start, resp.TTL)
	return nil
}

func leaseGone(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }
