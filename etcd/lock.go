package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// handle is the backend's state of one lock attempt, then of the lock held;
// it is Grant.Handle. It is made, and registered with the loss watch, before
// the attempt creates its key.
type handle struct {
	key      string      // the etcd key: queue + owner
	q        string      // its queue
	w        *watcher    // the loss watch it is registered with, or nil
	qw       *queueWatch // its queue's loss watch, if registered (under w.mu)
	rev      int64       // its CreateRevision, the token; 0 until created (under mu until granted)
	lost     context.Context
	shutLost context.CancelFunc

	mu        sync.Mutex
	lease     *lease
	state     handleState
	deletedAt int64 // the loss watch saw the key deleted at this revision
	missingAt int64 // a check found the key absent at this revision
}

type handleState int

const (
	pending handleState = iota // the attempt is under way
	held
	releasing
	ended
)

// As gives lease-level access (see Lease.As): a *clientv3.Cmp that is true
// only while this lease's key still exists with its CreateRevision, i.e.
// while it owns the lock — put it in the If of your own transactions to
// guard etcd writes — and a *clientv3.LeaseID, the etcd lease the key is
// bound to now (it changes when a Refresh changes the TTL, and is reused by
// later locks of the Locker once released: attach nothing to it).
func (h *handle) As(target any) bool {
	switch t := target.(type) {
	case *clientv3.Cmp:
		*t = clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
		return true
	case *clientv3.LeaseID:
		h.mu.Lock()
		*t = h.lease.id
		h.mu.Unlock()
		return true
	}
	return false
}

// end marks the lock (or the attempt) over and unregisters it from the
// loss watch.
func (h *handle) end() {
	h.mu.Lock()
	h.state = ended
	h.mu.Unlock()
	if h.w != nil {
		h.w.remove(h)
	}
}

// newHandle makes the handle of an attempt on key, in queue q, and
// registers it with the loss watch: before the key exists, so that no
// deletion of it can be missed.
func (b *backend) newHandle(q, key string) *handle {
	h := &handle{key: key, q: q}
	h.lost, h.shutLost = context.WithCancel(context.Background())
	if b.lossWatch && b.loss.add(h) {
		h.w = b.loss
	}
	return h
}

// grant builds the Grant of a lock now owned: h's key was created at rev on
// lease l; start is when the round trip (or watch event) that confirmed
// ownership began (arrived). If the loss watch already saw the key go, Lost
// is done at once.
func (b *backend) grant(req driver.Request, h *handle, rev int64, l *lease, start time.Time) driver.Grant {
	h.mu.Lock()
	h.rev, h.lease, h.state = rev, l, held
	h.reportLocked()
	h.mu.Unlock()
	// Zero would mean "the requested TTL" to the portable layer.
	validity := max(min(req.TTL, l.left(start)), time.Nanosecond)
	g := driver.Grant{Token: rev, Validity: validity, Start: start, Handle: h}
	if h.w != nil {
		h.w.granted(h)
		g.Lost = h.lost
	}
	return g
}

// TryLock creates the key only if nothing is queued for it: one round trip on
// a recycled lease.
func (b *backend) TryLock(ctx context.Context, req driver.Request) (_ driver.Grant, err error) {
	defer b.denied(&err)
	l, err := b.takeLease(ctx, req.TTL)
	if err != nil {
		return driver.Grant{}, err
	}
	q := b.queue(req.Key)
	me := b.keyName(q, req.Owner)
	h := b.newHandle(q, me)
	start := time.Now()
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(q), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(me, req.Value, clientv3.WithLease(l.id))).
		Commit()
	if err != nil {
		// The put may have happened, or may still: the lease is dropped,
		// not recycled, and the give-back (unlockAttempt) revokes it.
		h.end()
		b.drop(q+req.Owner, l)
		return driver.Grant{}, fmt.Errorf("etcd: creating %q: %w", me, err)
	}
	if !resp.Succeeded {
		h.end()
		b.freeName(q, me)
		b.putSpare(l)
		return driver.Grant{}, &distlock.HeldError{Key: req.Key}
	}
	rev := resp.Header.Revision // a one-write txn: the key's CreateRevision
	return b.grant(req, h, rev, l, start), nil
}

func handleOf(g driver.Grant) (*handle, error) {
	h, ok := g.Handle.(*handle)
	if !ok || h == nil {
		return nil, fmt.Errorf("%w: etcd: the grant was not made by this backend", distlock.ErrInvalidOption)
	}
	return h, nil
}

// Refresh renews the lock's lease (if it does not already cover ttl) and
// checks the key is still ours. A new TTL moves the key to a lease of that
// TTL; the key keeps its CreateRevision, so the token does not change, and
// its value (the holder's WithValue, which the move leaves as it is).
func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (_ time.Duration, err error) {
	defer b.denied(&err)
	h, err := handleOf(g)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	state, l := h.state, h.lease
	h.mu.Unlock()
	if state != held {
		return 0, fmt.Errorf("%w: etcd: %q already released", distlock.ErrNotHeld, h.key)
	}
	start := time.Now()
	ours := clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
	onLease := clientv3.Compare(clientv3.LeaseValue(h.key), "=", int64(l.id))

	if leaseSeconds(ttl) == l.secs {
		if l.left(start) < ttl {
			if err := b.keepAlive(ctx, l); err != nil {
				if leaseGone(err) {
					h.end()
					return 0, fmt.Errorf("%w: etcd: the lease of %q has expired or was revoked", distlock.ErrNotHeld, h.key)
				}
				return 0, fmt.Errorf("etcd: renewing the lease of %q: %w", h.key, err)
			}
		}
		resp, err := b.cli.Txn(ctx).If(ours, onLease).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd: checking %q: %w", h.key, err)
		}
		if !resp.Succeeded {
			h.end()
			return 0, fmt.Errorf("%w: etcd: %q is gone", distlock.ErrNotHeld, h.key)
		}
		return max(min(ttl, l.left(start)), time.Nanosecond), nil
	}

	nl, err := b.takeLease(ctx, ttl)
	if err != nil {
		return 0, err
	}
	resp, err := b.cli.Txn(ctx).If(ours, onLease).Then(clientv3.OpPut(h.key, "", clientv3.WithLease(nl.id), clientv3.WithIgnoreValue())).Commit()
	if err != nil {
		// Unknown outcome: keep the old lease; if the key did move, the next
		// refresh finds it off that lease and reports the loss.
		return 0, fmt.Errorf("etcd: moving %q to a %v lease: %w", h.key, ttl, err)
	}
	if !resp.Succeeded {
		b.putSpare(nl)
		h.end()
		return 0, fmt.Errorf("%w: etcd: %q is gone", distlock.ErrNotHeld, h.key)
	}
	h.mu.Lock()
	h.lease = nl
	h.mu.Unlock()
	b.putSpare(l)
	return max(min(ttl, nl.left(start)), time.Nanosecond), nil
}

// Unlock deletes the key only if it still has its CreateRevision, so a
// retried release cannot delete anyone else's key; the lease is recycled.
func (b *backend) Unlock(ctx context.Context, g driver.Grant) (err error) {
	defer b.denied(&err)
	if g.Handle == nil && g.Owner != "" {
		return b.unlockAttempt(ctx, g)
	}
	h, err := handleOf(g)
	if err != nil {
		return err
	}
	h.mu.Lock()
	if h.state != held {
		h.mu.Unlock()
		return fmt.Errorf("%w: etcd: %q already released", distlock.ErrNotHeld, h.key)
	}
	// Our own delete must not look like a loss to the watch.
	h.state = releasing
	l := h.lease
	h.mu.Unlock()

	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
		Then(clientv3.OpDelete(h.key)).
		Commit()
	if err != nil {
		h.mu.Lock()
		h.state = held
		h.reportLocked() // deleted meanwhile, by us or not: report it
		h.mu.Unlock()
		return fmt.Errorf("etcd: deleting %q: %w", h.key, err)
	}
	h.end()
	if !resp.Succeeded {
		return fmt.Errorf("%w: etcd: %q is gone", distlock.ErrNotHeld, h.key)
	}
	b.freeName(h.q, h.key)
	b.putSpare(l)
	return nil
}

// unlockAttempt gives back a TryLock whose reply was lost: it revokes the
// attempt's lease, which deletes its key if the put landed and refuses the
// put if it lands later, so one call settles it. Without the lease (another
// Locker's attempt, or a full map) it deletes the key named after the
// attempt's owner value, which cannot be anyone else's; an attempt that
// reused a name (keyName) is then left to its lease's expiry.
func (b *backend) unlockAttempt(ctx context.Context, g driver.Grant) error {
	attempt := b.queue(g.Key) + g.Owner
	b.mu.Lock()
	l := b.dropped[attempt]
	delete(b.dropped, attempt)
	b.mu.Unlock()
	if l != nil {
		_, err := b.cli.Revoke(ctx, l.id)
		if err == nil || leaseGone(err) {
			return nil
		}
		b.drop(attempt, l) // asked again by the portable layer
		return fmt.Errorf("etcd: revoking the lease of %q: %w", attempt, err)
	}
	// No lease kept: the attempt failed before its put was sent (taking
	// a lease), or the map was full. Delete the key if it is there; if it
	// is not, there is nothing to ask again for.
	if _, err := b.cli.Delete(ctx, attempt); err != nil {
		return fmt.Errorf("etcd: deleting %q: %w", attempt, err)
	}
	return nil
}

// maxDropped bounds the leases kept for give-backs; past it, expired ones
// are forgotten, and a give-back without its lease deletes the key instead.
const maxDropped = 1024

// drop keeps l, the lease of the ambiguous attempt (queue + owner value),
// for its give-back.
func (b *backend) drop(attempt string, l *lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dropped) >= maxDropped {
		now := time.Now()
		for k, d := range b.dropped {
			if d.left(now) <= 0 {
				delete(b.dropped, k)
			}
		}
	}
	if len(b.dropped) < maxDropped {
		b.dropped[attempt] = l
	}
}

// maxNames bounds the queues with a key name kept for reuse.
const maxNames = 1024

// keyName names the key of an attempt on queue q: the Locker's last key
// there if it is known deleted, else one after the attempt's owner value.
// etcd keeps a deleted key in its index until the history is compacted,
// and every read of the queue walks past it: with a name per attempt,
// a key locked again and again grew a longer walk with each lock.
func (b *backend) keyName(q, owner string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k, ok := b.names[q]; ok {
		delete(b.names, q)
		return k
	}
	return q + owner
}

// freeName offers key, of queue q, for reuse: it is known not to exist
// (deleted by us, or never created), and no put of it is on its way.
func (b *backend) freeName(q, key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.names) < maxNames {
		b.names[q] = key
	}
}
