package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/mutation"
)

// LeaseRow is the lock row of a lease of this backend (Lease.As).
type LeaseRow struct {
	Key, Owner string
	Token      distlock.Token
	sql        *statements
}

// ErrLeaseExpired is matched by the error of WithLease when the lease no
// longer holds its lock by the database's clock, at the start or before
// the commit; the transaction was rolled back. It also matches
// distlock.ErrNotHeld.
var ErrLeaseExpired error = leaseExpired{}

type leaseExpired struct{}

func (leaseExpired) Error() string        { return "postgres: lease expired or taken over" }
func (leaseExpired) Is(target error) bool { return target == distlock.ErrNotHeld }

// WithLease runs fn in a transaction of db that commits only while lease
// still holds its lock by the database's own clock. It reads the lock row
// FOR SHARE first, so no new holder can be granted the key until the
// transaction ends, and checks the expiry again in the string that commits:
// a holder paused past its TTL has every write refused, whether or not a
// newer holder has written. db must reach the lock table's database (the
// Locker's pool or another pool on it).
//
// The cost: the row lock holds back the next grant, and the lease's own
// renewal, for as long as the transaction runs; keep it well under the
// TTL. Guard writes to other databases with package fencing, whose Guard
// can also run inside fn.
func WithLease(ctx context.Context, db fencing.Beginner, lease *distlock.Lease, fn func(pgx.Tx) error) (err error) {
	var row LeaseRow
	switch {
	case db == nil || lease == nil || fn == nil:
		return fmt.Errorf("%w: postgres: WithLease needs a db, a lease and a function", distlock.ErrInvalidOption)
	case !lease.As(&row):
		return fmt.Errorf("%w: postgres: WithLease takes a lease of the postgres backend", distlock.ErrInvalidOption)
	}
	if _, nested := db.(pgx.Tx); nested {
		// Its Begin is a savepoint: the outer COMMIT, later, would keep
		// writes made after the lease ended.
		return fmt.Errorf("%w: postgres: WithLease needs a pool or a connection, not a transaction", distlock.ErrInvalidOption)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := row.hold(ctx, tx); err != nil && !mutation.On("lease-unchecked") { // mutation: lease-unchecked
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if mutation.On("lease-unchecked") { // mutation: lease-unchecked
		return tx.Commit(ctx)
	}
	return row.commit(ctx, tx)
}

// hold locks the lease's row FOR SHARE: nil while the lease holds.
func (r *LeaseRow) hold(ctx context.Context, tx pgx.Tx) error {
	var held bool
	var key, owner, token string
	err := tx.QueryRow(ctx, r.sql.holdShare, r.Key, r.Owner, int64(r.Token)).Scan(&held, &key, &owner, &token)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && !held):
		return r.expired()
	case err != nil:
		return fmt.Errorf("postgres: reading the lock row of %q: %w", r.Key, err)
	}
	return nil
}

// commit checks the lease once more and commits, in one string the server
// runs through: nothing the client does can come between the two.
func (r *LeaseRow) commit(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, r.sql.commitHeld, pgx.QueryExecModeSimpleProtocol)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == leaseExpiredCode:
		return r.expired()
	case err != nil:
		return fmt.Errorf("postgres: commit: %w", err)
	}
	// The server has committed; this only hands the connection back (with
	// a live ctx: a failed call would close the caller's connection).
	_ = tx.Rollback(context.WithoutCancel(ctx))
	return nil
}

func (r *LeaseRow) expired() error {
	return fmt.Errorf("%w: %q (token %d)", ErrLeaseExpired, r.Key, r.Token)
}
