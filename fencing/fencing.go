package fencing

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock"
)

// DB runs statements. *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner is a DB that can open a transaction. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it; on a pgx.Tx, Begin opens a savepoint, so the fence
// then commits with the outer transaction.
type Beginner interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrStaleToken is matched (errors.Is) by the error of a guarded write whose
// token is smaller than one the database has already accepted for the
// resource: a newer lock holder exists. The error is a *StaleTokenError.
var ErrStaleToken = errors.New("fencing: stale token")

// ErrRowNotFound is returned (wrapped) by UpdateRow when no row matched the
// key at all, as opposed to a row whose fence is ahead of the token.
var ErrRowNotFound = errors.New("fencing: no row matches the key")

// ErrInvalid is matched by every invalid-input error of this package (empty
// resource, nil database, nil function, non-positive token, bad table or
// column names). It also matches distlock.ErrInvalid.
var ErrInvalid error = invalidError{}

type invalidError struct{}

func (invalidError) Error() string        { return "fencing: invalid argument" }
func (invalidError) Is(target error) bool { return target == distlock.ErrInvalid }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// StaleTokenError says which token was refused and which one the database
// holds. It matches ErrStaleToken.
type StaleTokenError struct {
	// Resource is the fence table's resource, or for UpdateRow the table
	// and key of the row.
	Resource string
	// Token is the refused token.
	Token distlock.Token
	// Stored is the token the database holds, or 0 if it could not be read.
	Stored distlock.Token
}

// Error says which token was refused and, if known, which one won.
func (e *StaleTokenError) Error() string {
	if e.Stored > 0 {
		return fmt.Sprintf("fencing: stale token %d for %s: the database has accepted token %d", e.Token, e.Resource, e.Stored)
	}
	return fmt.Sprintf("fencing: stale token %d for %s: the database has accepted a newer one", e.Token, e.Resource)
}

// Is makes a StaleTokenError match ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// DefaultTable is the fence table used by Migrate, Guard and WithGuard.
const DefaultTable = "distlock_fence"

// Table is a fence table: one row per guarded resource holding the highest
// token accepted for it. Its methods are safe for concurrent use.
type Table struct {
	name                     string // quoted, possibly schema-qualified
	ddl, guardSQL, storedSQL string
}

var defaultTable = mustTable(DefaultTable)

func mustTable(name ...string) *Table {
	t, err := NewTable(name...)
	if err != nil {
		panic(err)
	}
	return t
}

// NewTable names a fence table: NewTable("fence") or, schema-qualified,
// NewTable("app", "fence"). The name is quoted, so it is used exactly as
// given (case-sensitive) and cannot inject SQL.
func NewTable(name ...string) (*Table, error) {
	if len(name) == 0 || len(name) > 3 {
		return nil, invalid("table name needs 1 to 3 parts (schema.table), got %d", len(name))
	}
	for _, p := range name {
		if err := checkIdent(p); err != nil {
			return nil, invalid("table name: %w", err)
		}
	}
	q := pgx.Identifier(name).Sanitize()
	return &Table{
		name: q,
		ddl: "CREATE TABLE IF NOT EXISTS " + q + " (\n" +
			"    resource text   PRIMARY KEY,\n" +
			"    token    bigint NOT NULL\n)",
		guardSQL: "INSERT INTO " + q + " AS f (resource, token) VALUES ($1, $2) " +
			"ON CONFLICT (resource) DO UPDATE SET token = excluded.token " +
			"WHERE f.token <= excluded.token RETURNING token",
		storedSQL: "SELECT token FROM " + q + " WHERE resource = $1",
	}, nil
}

// checkIdent rejects names PostgreSQL would reject or silently change.
func checkIdent(s string) error {
	switch {
	case s == "":
		return errors.New("empty identifier")
	case len(s) > 63:
		// PostgreSQL truncates longer names, so two long names could meet.
		return fmt.Errorf("identifier %q is longer than 63 bytes", s)
	}
	for _, r := range s {
		if r == 0 {
			return fmt.Errorf("identifier %q holds a NUL byte", s)
		}
	}
	return nil
}

// Name returns the quoted table name as it appears in SQL.
func (t *Table) Name() string { return t.name }

// DDL returns the CREATE TABLE IF NOT EXISTS statement of the table.
func (t *Table) DDL() string { return t.ddl }

// Create creates the table if it does not exist. It is safe to run at every
// start-up, and from several processes at once.
func (t *Table) Create(ctx context.Context, db DB) error {
	if err := checkCall(ctx, db); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, t.ddl); err != nil {
		// Concurrent CREATE TABLE IF NOT EXISTS can still collide on the
		// catalog's unique index; the table exists then, which is the goal.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return nil
		}
		return fmt.Errorf("fencing: create table %s: %w", t.name, err)
	}
	return nil
}

// Guard raises the fence of resource to token inside tx, or returns a
// *StaleTokenError (matching ErrStaleToken) if the table already holds a
// larger token. An equal token is accepted. Call it as the first statement
// of the transaction, before reading what you will write (see the package
// doc), and roll the transaction back if it fails: even a refused guard
// holds the fence row lock until tx ends. That lock is what serialises the
// guarded transactions on one resource.
func (t *Table) Guard(ctx context.Context, tx pgx.Tx, resource string, token distlock.Token) error {
	if err := checkGuard(ctx, tx, resource, token); err != nil {
		return err
	}
	var got int64
	err := tx.QueryRow(ctx, t.guardSQL, resource, int64(token)).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fencing: guard %q: %w", resource, err)
	}
	// Stale. Read the winning token for the error; this runs only on the
	// rejection path, so the accepted path stays one statement.
	se := &StaleTokenError{Resource: fmt.Sprintf("%q", resource), Token: token}
	var stored int64
	if tx.QueryRow(ctx, t.storedSQL, resource).Scan(&stored) == nil {
		se.Stored = distlock.Token(stored)
	}
	return se
}

// WithGuard begins a transaction on db, guards resource with token as its
// first statement, runs fn with the transaction and commits. It rolls back,
// and returns the error, if the guard refuses the token (ErrStaleToken), fn
// returns an error (returned as is), or fn panics (the panic goes on after
// the rollback). If Commit fails its error is returned; as with any commit,
// a connection lost during it leaves the outcome unknown.
func (t *Table) WithGuard(ctx context.Context, db Beginner, resource string, token distlock.Token, fn func(pgx.Tx) error) (err error) {
	if err := checkCall(ctx, db); err != nil {
		return err
	}
	if err := checkResource(resource, token); err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil function")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("fencing: begin: %w", err)
	}
	done := false
	defer func() {
		if done {
			return
		}
		// Reached on error and on panic. On a cancelled ctx, pgx closes
		// the connection instead, which also rolls back on the server.
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) && err != nil {
			err = errors.Join(err, fmt.Errorf("fencing: rollback: %w", rerr))
		}
	}()
	if err := t.Guard(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		done = true // a failed commit ends the transaction
		return fmt.Errorf("fencing: commit %q: %w", resource, err)
	}
	done = true
	return nil
}

// Migrate creates DefaultTable if it does not exist.
func Migrate(ctx context.Context, db DB) error { return defaultTable.Create(ctx, db) }

// Guard is Table.Guard on DefaultTable.
func Guard(ctx context.Context, tx pgx.Tx, resource string, token distlock.Token) error {
	return defaultTable.Guard(ctx, tx, resource, token)
}

// WithGuard is Table.WithGuard on DefaultTable.
func WithGuard(ctx context.Context, db Beginner, resource string, token distlock.Token, fn func(pgx.Tx) error) error {
	return defaultTable.WithGuard(ctx, db, resource, token, fn)
}

func checkGuard(ctx context.Context, tx pgx.Tx, resource string, token distlock.Token) error {
	if err := checkCall(ctx, tx); err != nil {
		return err
	}
	return checkResource(resource, token)
}

func checkCall(ctx context.Context, db any) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if isNil(db) {
		return invalid("nil database")
	}
	return nil
}

func checkResource(resource string, token distlock.Token) error {
	// Resources are usually lock keys, so the same rules apply; they also
	// keep NUL bytes, which text columns refuse, out of the statement.
	if err := distlock.ValidateKey(resource); err != nil {
		return invalid("resource: %w", err)
	}
	return checkToken(token)
}

func checkToken(token distlock.Token) error {
	if token <= 0 {
		// Every backend's tokens are positive; zero is an unset Token.
		return invalid("token %d is not positive", token)
	}
	return nil
}

// isNil reports an untyped nil or a nil pointer inside an interface, such as
// a (*pgxpool.Pool)(nil), which would otherwise panic on first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
