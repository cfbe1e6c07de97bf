package redlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

// inspectDrift is the clock-drift allowance taken off the TTL Inspect
// reports: the Locker's own WithDrift does not reach the backend, so the
// default rule, applied to the time the lock has left.
var inspectDrift = driver.Drift{Factor: distlock.DefaultDriftFactor, Min: distlock.DefaultDriftMin}

// Inspect implements driver.Backend.Inspect: it reads every node at once (one
// read-only script each, bounded by the node timeout) and reports a holder
// only when a majority of the nodes hold the lock for one owner and have
// that owner's holder record, which phase 2 of the acquire writes with the
// lease's token (see judge). It returns as soon as the answer is settled;
// an error matching ErrNoQuorum when fewer than a majority answered, or
// when the silent nodes could still make or break a majority.
func (b *backend) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	start := time.Now()
	k := redisnode.KeysFor(b.prefix, key)
	nt := b.timeout(distlock.DefaultTTL)
	n := len(b.nodes)
	views := make([]redisnode.NodeLock, n) // written before the reply is sent
	ch := b.fanOut(ctx, b.all(), nt, func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
		v, err := redisnode.InspectOn(ctx, c, k)
		views[i] = v
		return v.Held, err
	})
	t := tally{failed: map[int]error{}, answered: map[int]bool{}}
	timer := time.NewTimer(time.Until(deadline(nt)))
	defer timer.Stop()
	var v verdict
	for {
		v = b.judge(views, t)
		if v.settled || len(t.answered) == n {
			break
		}
		select {
		case r := <-ch:
			t.add(r)
			continue
		case <-ctx.Done():
			return driver.Holder{}, ctx.Err()
		case <-timer.C:
		}
		break
	}
	t.silent = n - len(t.answered)
	switch {
	case v.held:
		r := v.ttl - time.Since(start) - inspectDrift.For(v.ttl)
		return driver.Holder{Held: true, Token: int64(v.token), Value: v.value, TTL: max(r, time.Millisecond), Waiters: -1}, nil
	case v.settled:
		return driver.Holder{Waiters: -1}, nil
	case len(t.answered)-len(t.failed) < b.quorum:
		if err := b.refused(fmt.Sprintf("inspecting %q", key), t); err != nil {
			return driver.Holder{}, err
		}
		return driver.Holder{}, fmt.Errorf("%w: inspecting %q: %d of %d nodes answered (need %d)%s",
			ErrNoQuorum, key, len(t.answered)-len(t.failed), n, b.quorum, b.summary(t))
	case v.most >= b.quorum:
		return driver.Holder{}, fmt.Errorf("%w: inspecting %q: held for one owner on %d of %d nodes, its holder record on %d, which the %d that did not answer could make a majority%s",
			ErrNoQuorum, key, v.most, n, v.recorded, n-len(t.answered)+len(t.failed), b.summary(t))
	}
	return driver.Holder{}, fmt.Errorf("%w: inspecting %q: held for one owner on %d of %d nodes, which the %d that did not answer could make a majority%s",
		ErrNoQuorum, key, v.most, n, n-len(t.answered)+len(t.failed), b.summary(t))
}

// verdict is what the answers so far say of a lock.
type verdict struct {
	settled  bool // no answer still to come can change it
	held     bool // settled, and held: token, value and ttl are set
	token    distlock.Token
	value    string
	ttl      time.Duration // how long a majority still holds it, by the nodes' PTTLs
	most     int           // the most nodes that agree on one owner
	recorded int           // of those, the nodes with that owner's holder record
}

// judge reads the answers of t (views of the nodes that answered):
//
//   - held, when a majority hold the lock for one owner and have that
//     owner's holder record (its token and value). Phase 2 writes the
//     record only where it raised the counter to the lease's token, and a
//     refresh only for a granted lease, so records on a majority order the
//     token: every later majority meets this one and gets a larger token.
//     Records on fewer (a phase 2 that failed) do not: a later majority
//     can miss them and get a smaller token, and Locker.Watch would then
//     show an older holder after a newer one. A node's counter is not
//     used: it may be above the lease's token (a node restarted without
//     its data and seeded from its clock, a straggler's own increment).
//   - free, when a majority hold the lock for one owner but too few have
//     its record to make a majority even with every node that has not
//     answered (or failed): an acquire between its phases, one whose phase
//     2 failed, or a lease decided by a bare majority one node of which
//     lost its data, until the lease's refresh writes the other records.
//   - free, when no owner can reach a majority even if every node that has
//     not answered (or failed) held it.
//
// Anything else is not settled yet.
func (b *backend) judge(views []redisnode.NodeLock, t tally) verdict {
	byOwner := map[string][]int{}
	for _, i := range t.yes {
		byOwner[views[i].Owner] = append(byOwner[views[i].Owner], i)
	}
	unknown := len(b.nodes) - len(t.answered) + len(t.failed)
	v := verdict{}
	for _, nodes := range byOwner {
		if len(nodes) >= b.quorum { // at most one owner
			return b.judgeOwner(views, nodes, unknown)
		}
		v.most = max(v.most, len(nodes))
	}
	v.settled = v.most+unknown < b.quorum
	return v
}

// judgeOwner is judge when nodes, a majority, hold the lock for one owner
// and unknown nodes have not answered.
func (b *backend) judgeOwner(views []redisnode.NodeLock, nodes []int, unknown int) verdict {
	v := verdict{most: len(nodes)}
	var ttls []time.Duration
	for _, i := range nodes {
		nl := views[i]
		ttls = append(ttls, nl.TTL)
		if nl.Recorded {
			v.recorded++
			if nl.Token > v.token { // every record of one owner has its lease's token
				v.token, v.value = nl.Token, nl.Value
			}
		}
	}
	switch {
	case v.recorded >= b.quorum:
		v.settled, v.held = true, true
		// The lock lasts while a majority hold it: the quorum-th longest.
		slices.SortFunc(ttls, func(x, y time.Duration) int { return cmp.Compare(y, x) })
		v.ttl = ttls[b.quorum-1]
	case v.recorded+unknown < b.quorum:
		v.settled = true
	}
	return v
}
