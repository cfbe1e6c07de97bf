package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
)

// ErrNoLeader is returned by Leader when nobody leads the role.
var ErrNoLeader = errors.New("election: no leader")

// Election is one role that processes campaign for. It is safe for
// concurrent use; it holds nothing of its own (its Locker does).
type Election struct {
	l    distlock.Locker
	role string
}

// New returns the election of role on l: role is the lock key every
// candidate takes, so do not also lock it for anything else.
func New(l distlock.Locker, role string) (*Election, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: election needs a Locker", distlock.ErrInvalidOption)
	}
	if err := distlock.ValidateKey(role); err != nil {
		return nil, fmt.Errorf("election role: %w", err)
	}
	return &Election{l: l, role: role}, nil
}

// Role returns the role's name (its lock key).
func (e *Election) Role() string { return e.role }

// Campaign waits until the caller leads the role, or ctx ends (the error
// then matches distlock.ErrNotAcquired and ctx.Err()). value (at most
// distlock.MaxValueLen bytes) is what observers see of this leader: an
// address, a host name. opts are lease options (WithTTL, WithRenewInterval,
// WithBackoff…); the term always renews itself.
func (e *Election) Campaign(ctx context.Context, value string, opts ...distlock.CallOption) (*Term, error) {
	opts = append(opts[:len(opts):len(opts)], distlock.WithValue(value), distlock.WithAutoRenew(true))
	ls, err := e.l.Acquire(ctx, e.role, opts...)
	if err != nil {
		return nil, err
	}
	return &Term{lease: ls}, nil
}

// Leader is the leader of a role as the backend reports it.
type Leader struct {
	Value string         // the leader's Campaign value
	Token distlock.Token // its term's token
	TTL   time.Duration  // how long its lock has left unless renewed (0 on session-bound backends)
}

// Leader returns the current leader, or ErrNoLeader. It may be out of date
// by the time it returns.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	h, err := e.l.Inspect(ctx, e.role)
	if err != nil {
		return Leader{}, err
	}
	if !h.Held {
		return Leader{}, fmt.Errorf("%w for %q", ErrNoLeader, e.role)
	}
	return Leader{Value: h.Value, Token: h.Token, TTL: h.TTL}, nil
}

// Observe reports the current leader, if any, then every new leader, in
// term order. The channel is closed when ctx ends or the Locker closes.
// opts are call options of Locker.Watch: WithBackoff's cap bounds the
// polling on backends without server watches (Redis, Redlock).
func (e *Election) Observe(ctx context.Context, opts ...distlock.CallOption) (<-chan Leader, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", distlock.ErrInvalidOption)
	}
	changes, err := e.l.Watch(ctx, e.role, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan Leader)
	go forward(ctx, changes, out)
	return out, nil
}

// forward passes the held states of changes to out, queueing them while the
// reader is slow, and returns as soon as changes closes (the Locker closed)
// or ctx ends, so no goroutine outlives either.
func forward(ctx context.Context, changes <-chan distlock.Holder, out chan<- Leader) {
	defer close(out)
	var queue []Leader
	for {
		var send chan<- Leader
		var next Leader
		if len(queue) > 0 {
			send, next = out, queue[0]
		}
		select {
		case h, ok := <-changes:
			if !ok {
				return
			}
			if h.Held {
				queue = append(queue, Leader{Value: h.Value, Token: h.Token, TTL: h.TTL})
			}
		case send <- next:
			queue = queue[1:]
		case <-ctx.Done():
			return
		}
	}
}

// Term is one tenure of leadership. Its lease renews itself until Resign,
// loss, or its Locker's Close.
type Term struct {
	lease *distlock.Lease
}

// Token returns the term's fencing token: larger than every earlier term's.
func (t *Term) Token() distlock.Token { return t.lease.Token() }

// Fence returns the term's fence epoch, token and holder id, for writes
// through package fencing.
func (t *Term) Fence() distlock.Fence { return t.lease.Fence() }

// Value returns the value this leader campaigned with.
func (t *Term) Value() string { return t.lease.Value() }

// Done is closed the moment leadership ends: resigned, lost, or the Locker
// closed.
func (t *Term) Done() <-chan struct{} { return t.lease.Done() }

// Err returns nil while the term lasts, then why it ended (see
// distlock.Lease.Err: ErrReleased after Resign, ErrLeaseLost, ErrClosed).
func (t *Term) Err() error { return t.lease.Err() }

// Resign gives leadership up, so another candidate can be elected at once.
// It returns an error matching distlock.ErrNotHeld if the term had ended.
func (t *Term) Resign(ctx context.Context) error { return t.lease.Release(ctx) }

// Lease returns the term's lease, for what Term does not wrap (As, Expires).
func (t *Term) Lease() *distlock.Lease { return t.lease }
