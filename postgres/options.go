package postgres

import (
	"github.com/distlock/distlock/driver"
)

type (
	tableKey     struct{}
	notifyKey    struct{}
	closePoolKey struct{}
)

// Option is an option of this backend, for its New, NewBackend and Open
// with a postgres:// or postgresql:// URL; it is a distlock.Option, which
// single calls do not take.
type Option struct{ o driver.Option }

// DriverOption returns the setting.
func (o Option) DriverOption() driver.Option { return o.o }

// WithTable sets the lock table (default DefaultTable): a lower-case
// identifier, optionally schema-qualified. Lockers that should exclude
// each other need the same table; Migrate with the same option creates it.
func WithTable(name string) Option {
	if _, err := newStatements(name); err != nil {
		return Option{driver.InvalidOption("%v", err)}
	}
	return Option{driver.BackendOption("postgres", "WithTable", tableKey{}, name)}
}

// WithNotify turns release notices on (the default) or off. Notices need
// one connection of the backend's own, made at the first wait, that LISTENs
// outside the pool; behind a pooler in transaction mode (PgBouncer) LISTEN
// does not work: turn them off, and waiters poll with back-off, bounded by
// the holder's remaining TTL. A release is then noticed up to one back-off
// step late.
func WithNotify(on bool) Option {
	return Option{driver.BackendOption("postgres", "WithNotify", notifyKey{}, on)}
}

// WithClosePool makes Close close the pool (default false: the pool is
// the caller's).
func WithClosePool(on bool) Option {
	return Option{driver.BackendOption("postgres", "WithClosePool", closePoolKey{}, on)}
}
