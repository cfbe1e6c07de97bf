package postgres

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fencing"
)

func init() {
	driver.Register("postgres", open)
	driver.Register("postgresql", open)
}

// New returns a Locker on the lock table of pool (create it with Migrate).
// Close does not close pool unless WithClosePool(true).
func New(pool *pgxpool.Pool, opts ...distlock.Option) (distlock.Locker, error) {
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	b, err := newBackend(pool, backendOpts)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, lockerOpts...) // closes b if it fails
}

// NewBackend returns the raw Backend on pool, for wrapping (tests,
// middleware) before passing it to distlock.New. It takes postgres's own
// options and WithLogger; the portable ones go to distlock.New.
func NewBackend(pool *pgxpool.Pool, opts ...distlock.Option) (driver.Backend, error) {
	b, err := newBackend(pool, driver.Options(opts))
	if err != nil {
		return nil, err // not a nil *backend in a non-nil interface
	}
	return b, nil
}

func newBackend(pool *pgxpool.Pool, opts []driver.Option) (*backend, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres: nil pool", distlock.ErrInvalidOption)
	}
	o, err := driver.ResolveBackend("postgres", opts)
	if err != nil {
		return nil, err
	}
	sql, err := newStatements(driver.BackendValueOr(o, tableKey{}, DefaultTable))
	if err != nil {
		return nil, err
	}
	cc := pool.Config().ConnConfig
	b := &backend{pool: pool, sql: sql, addr: net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))),
		closePool: driver.BackendValueOr(o, closePoolKey{}, false)}
	if driver.BackendValueOr(o, notifyKey{}, true) {
		b.notices = newListener(cc.Copy(), b.channelName)
	}
	return b, nil
}

// Migrate creates the lock table and its waiters table (name +
// "_waiters") if they do not exist (WithTable names another). Run it as
// the role that should own them; the role the Lockers use needs USAGE on
// the schema, SELECT, INSERT, UPDATE on the lock table and SELECT, INSERT,
// UPDATE, DELETE on the waiters table.
func Migrate(ctx context.Context, db fencing.DB, opts ...Option) error {
	if db == nil {
		return fmt.Errorf("%w: postgres: nil db", distlock.ErrInvalidOption)
	}
	o, err := driver.ResolveBackend("postgres", driver.Options(opts))
	if err != nil {
		return err
	}
	sql, err := newStatements(driver.BackendValueOr(o, tableKey{}, DefaultTable))
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, sql.ddl); err != nil {
		return fmt.Errorf("postgres: creating %s: %w", sql.table, err)
	}
	return nil
}
