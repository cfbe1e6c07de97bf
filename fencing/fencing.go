package fencing

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/distlock/distlock/internal/pgerr"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/mutation"
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
// resource (a newer lock holder exists), or equal to one it accepted from
// another holder (the backend handed the same token out twice). The error is
// a *StaleTokenError.
var ErrStaleToken = errors.New("fencing: stale token")

// ErrRowNotFound is returned (wrapped) by UpdateRow when no row matched the
// key at all, as opposed to a row whose fence is ahead of the token.
var ErrRowNotFound = errors.New("fencing: no row matches the key")

// ErrForeignTrigger is matched (errors.Is) by the error of Migrate and
// Create on a fence table that carries a trigger distlock did not install,
// and of a guard whose row such a trigger rewrote. A trigger runs as the
// writer and may change any row it sees, fences included, so only the
// table's owner may have one there; the error names it.
var ErrForeignTrigger = errors.New("fencing: a trigger distlock did not install is on the fence table")

// ErrInvalid is matched by every invalid-input error of this package (empty
// resource, nil database, nil function, non-positive token, empty or
// malformed holder, bad table or column names). It also matches
// distlock.ErrInvalid.
var ErrInvalid error = invalidError{}

type invalidError struct{}

func (invalidError) Error() string        { return "fencing: invalid argument" }
func (invalidError) Is(target error) bool { return target == distlock.ErrInvalid }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// dbError is an error of the database, wrapped with what this package was
// doing. The database's error stays in the chain (errors.As finds its
// *pgconn.PgError); the refusal of the role, or of the server's
// certificate, also matches distlock.ErrAccessDenied.
type dbError struct{ err error }

func (e *dbError) Error() string { return e.err.Error() }
func (e *dbError) Unwrap() error { return e.err }

// Is makes a refusal match distlock.ErrAccessDenied: retrying it cannot
// help, unlike a lost connection.
func (e *dbError) Is(target error) bool {
	return target == distlock.ErrAccessDenied && pgerr.Denied(e.err)
}

// dbErr is fmt.Errorf(format, args...), whose %w is an error of the
// database, made a *dbError.
func dbErr(format string, args ...any) error {
	return &dbError{fmt.Errorf(format, args...)}
}

// StaleTokenError says which fence was refused and what the database holds.
// It matches ErrStaleToken. Stored == Token means the token was equal but
// another holder had written it: the backend handed one token out twice.
type StaleTokenError struct {
	// Resource is the fence table's resource, or for UpdateRow the table
	// and key of the row.
	Resource string
	// Epoch, Token and Holder are the refused fence.
	Epoch  int64
	Token  distlock.Token
	Holder string
	// StoredEpoch and Stored are the epoch and token the database holds
	// (Stored 0 if they could not be read).
	StoredEpoch int64
	Stored      distlock.Token
	// StoredHolder is the holder recorded with Stored; "" if unknown or if
	// none was recorded (a row written before holders were recorded).
	StoredHolder string
}

// Error says which token was refused and, if known, which one won.
func (e *StaleTokenError) Error() string {
	switch {
	case e.Stored > 0 && e.StoredEpoch > e.Epoch:
		return fmt.Sprintf("fencing: stale token %d at fence epoch %d for %s: the database has accepted fence epoch %d (a newer deployment)",
			e.Token, e.Epoch, e.Resource, e.StoredEpoch)
	case e.Epoch > 0 && e.StoredEpoch == e.Epoch && e.Stored > 0 && e.Stored != e.Token:
		return fmt.Sprintf("fencing: stale token %d for %s: the database has accepted token %d at fence epoch %d", e.Token, e.Resource, e.Stored, e.Epoch)
	case e.Stored > 0 && e.Stored == e.Token && e.StoredHolder == "":
		return fmt.Sprintf("fencing: stale token %d for %s: the database has accepted the same token from a holder it did not record (written before holders were recorded); only a larger token passes",
			e.Token, e.Resource)
	case e.Stored > 0 && e.Stored == e.Token:
		return fmt.Sprintf("fencing: stale token %d for %s: the database has accepted the same token from another holder (%s), not from %s: the token was handed out twice",
			e.Token, e.Resource, e.StoredHolder, e.Holder)
	case e.Stored > 0:
		return fmt.Sprintf("fencing: stale token %d for %s: the database has accepted token %d", e.Token, e.Resource, e.Stored)
	}
	return fmt.Sprintf("fencing: stale token %d for %s: the database has accepted a newer one, or the same one from another holder", e.Token, e.Resource)
}

// Is makes a StaleTokenError match ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// DefaultTable is the fence table used by Migrate, Guard and WithGuard.
const DefaultTable = "distlock_fence"

// Table is a fence table: one row per guarded resource holding the highest
// (epoch, token) accepted for it and the holder that presented it. Its
// methods are safe for concurrent use.
type Table struct {
	name                     string   // quoted, possibly schema-qualified
	parts                    []string // the name as given, unquoted
	ddl, guardSQL, storedSQL string
	lookSQL, columnsSQL      string
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
		name:  q,
		parts: append([]string(nil), name...),
		ddl: "CREATE TABLE IF NOT EXISTS " + q + " (\n" +
			"    resource text   PRIMARY KEY,\n" +
			"    epoch    bigint NOT NULL DEFAULT 0,\n" +
			"    token    bigint NOT NULL,\n" +
			"    holder   text\n)",
		// Pairs compare as (epoch, token): a larger epoch wins whatever its
		// token. A NULL holder (a row from before the column) equals
		// nothing, so such a row accepts only a larger pair.
		guardSQL: "INSERT INTO " + q + " AS f (resource, epoch, token, holder) VALUES ($1, $2, $3, $4) " +
			"ON CONFLICT (resource) DO UPDATE SET epoch = excluded.epoch, token = excluded.token, holder = " +
			// The mutant keeps the stored holder at an equal pair: the
			// trigger refuses a holder change there, and the harness must
			// see the guard's own bug, not the trigger's refusal.
			mutation.Pick("equal-token-accepted", "CASE WHEN (f.epoch, f.token) = (excluded.epoch, excluded.token) THEN f.holder ELSE excluded.holder END",
				"excluded.holder") + " " + // mutation: equal-token-accepted
			"WHERE (f.epoch, f.token) < (excluded.epoch, excluded.token) OR (f.epoch = excluded.epoch AND f.token = excluded.token AND " +
			mutation.Pick("equal-token-accepted", "TRUE", "f.holder = excluded.holder") + ") " + // mutation: equal-token-accepted
			"RETURNING epoch, token",
		storedSQL: "SELECT epoch, token, holder FROM " + q + " WHERE resource = $1",
		lookSQL:   lookSQL,
		columnsSQL: "ALTER TABLE " + q + " ADD COLUMN IF NOT EXISTS holder text, " +
			"ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0",
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

// DDL returns the CREATE TABLE IF NOT EXISTS statement of the table. The
// triggers come with UpgradeDDL, which a table created by an earlier
// version of this package also needs.
func (t *Table) DDL() string { return t.ddl }

// UpgradeDDL returns the statements that bring a fence table created by
// this or an earlier version of this package up to date, keeping its rows
// (those without an epoch get 0): a switch to the table's owner (SET LOCAL
// ROLE, so that what it creates is the owner's whoever runs it); ALTER
// TABLE … ADD COLUMN IF NOT EXISTS holder text, ADD COLUMN IF NOT EXISTS
// epoch bigint NOT NULL DEFAULT 0; then the table's trigger function
// (distlock_fence_no_lowering() for DefaultTable, a name derived from the
// table's for others) and the triggers distlock_fence_no_lowering (AFTER
// UPDATE OR DELETE, each row) and distlock_fence_no_truncate (BEFORE
// TRUNCATE), enabled ALWAYS, which refuse a lowered, moved or deleted
// fence. The function goes to the table's schema when the name is
// schema-qualified, else to the first schema of the search_path. Run them
// as the table's owner, a member of its role or a superuser, in one
// transaction (as one query they run in one). Create runs them when
// needed.
func (t *Table) UpgradeDDL() string {
	return t.upgradeScript(t.parts[:len(t.parts)-1])
}

// Create creates the table if it does not exist where the guard finds it
// (the search_path), and brings a table created by an earlier version of
// this package up to date (see UpgradeDDL): the holder and epoch columns,
// and the triggers that refuse a lowered fence. It is safe to run at every
// start-up, from several processes at once, and by a role that may only
// read and write a current table (it then only reads the catalog); on a
// table that is not current it needs the table's owner, a member of its
// role or a superuser, and gives up after 5s if other transactions hold
// the table. A trigger on the table that this package did not install is
// an error matching ErrForeignTrigger, whoever runs it.
func (t *Table) Create(ctx context.Context, db DB) error {
	if err := checkCall(ctx, db); err != nil {
		return err
	}
	// Look first, as the guard resolves the name (search_path): CREATE TABLE
	// IF NOT EXISTS looks only in the first schema of the path, so a role
	// with a schema of its own would make an empty table there that hides
	// the real one, and it needs rights (CREATE, a writable session) that a
	// runtime role on a current table does not have.
	schema, current, err := t.look(ctx, db)
	if err != nil || current {
		return err
	}
	if schema == "" {
		if _, err := db.Exec(ctx, t.ddl); err != nil {
			// Concurrent CREATE TABLE IF NOT EXISTS can still collide on
			// the catalog (the table, its row type, a unique index); the
			// table exists then, which is the goal. Were it something else
			// of that name, the look below finds no table and says so.
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || !alreadyExists[pgErr.Code] {
				return dbErr("fencing: create table %s: %w", t.name, err)
			}
		}
		if schema, current, err = t.look(ctx, db); err != nil || current {
			return err
		}
		if schema == "" {
			return fmt.Errorf("fencing: table %s was created but is not found on the search_path", t.name)
		}
	}
	// Processes starting together may all get here: the script's ALTER
	// queues them on the table lock, and what the first one made the
	// later ones make again, harmlessly. It runs only when something is
	// missing: ALTER TABLE takes an ACCESS EXCLUSIVE lock even when it has
	// nothing to do, and needs the owner. It waits for that lock at most
	// lockTimeout, so that the guards queued behind it are not stalled.
	if _, err := db.Exec(ctx, t.upgradeScript([]string{schema})); err != nil {
		return dbErr("fencing: bring %s up to date (the holder and epoch columns, the triggers that refuse a lowered fence; "+
			"this needs the table's owner, and no other transaction on the table for %s): %w", t.name, lockTimeout, err)
	}
	return nil
}

// look reports the schema of the table where the guard finds it ("" if
// there is none), and whether it has every column and trigger of this
// version. A foreign trigger on the table is an error matching
// ErrForeignTrigger: it could rewrite any fence (a BEFORE INSERT trigger
// the row check never sees), and an upgrade would leave it there.
func (t *Table) look(ctx context.Context, db DB) (schema string, current bool, err error) {
	var columns, triggers bool
	var foreign *string
	err = db.QueryRow(ctx, t.lookSQL, t.name, triggerBody).Scan(&schema, &columns, &triggers, &foreign)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, dbErr("fencing: look for table %s: %w", t.name, err)
	case foreign != nil:
		return schema, false, fmt.Errorf("%w: trigger %s on %s; only the table's owner may put a trigger there "+
			"(granting TRIGGER, or ALL, on the fence table trusts the grantee as its owner): drop it, then run Migrate again",
			ErrForeignTrigger, pgx.Identifier{*foreign}.Sanitize(), pgx.Identifier{schema, t.parts[len(t.parts)-1]}.Sanitize())
	}
	return schema, columns && triggers, nil
}

// alreadyExists are the SQLSTATEs of a CREATE that lost a race with another:
// unique_violation, duplicate_object, duplicate_table.
var alreadyExists = map[string]bool{"23505": true, "42710": true, "42P07": true}

// Guard raises the fence of resource to f inside tx, recording f's epoch,
// token and holder. It accepts an (epoch, token) pair larger than the
// stored one, from anyone, and a pair equal to it only from the holder that
// stored it, so one holder may write many times but two holders never pass
// with one token; a larger epoch wins whatever its token.
// Otherwise it returns a *StaleTokenError (matching ErrStaleToken). Take f
// from [distlock.Lease.Fence]. Call Guard as the first statement of the
// transaction, before reading what you will write (see "The rule: fence
// first, then read" in docs/fencing.md),
// and roll the transaction back if it fails: even a refused guard holds the
// fence row lock until tx ends. That lock is what serialises the guarded
// transactions on one resource.
func (t *Table) Guard(ctx context.Context, tx pgx.Tx, resource string, f distlock.Fence) error {
	if mutation.On("guard-skipped") { // mutation: guard-skipped
		return nil
	}
	if err := checkGuard(ctx, tx, resource, f); err != nil {
		return err
	}
	var epoch, token int64
	err := tx.QueryRow(ctx, t.guardSQL, resource, f.Epoch, int64(f.Token), f.Holder).Scan(&epoch, &token)
	if err == nil && (epoch != f.Epoch || token != int64(f.Token)) {
		// RETURNING shows the row as stored: a BEFORE INSERT trigger of
		// someone else's changed it, which no trigger of ours can see.
		return fmt.Errorf("%w: guard %q wrote (epoch %d, token %d) but the table stored (epoch %d, token %d)",
			ErrForeignTrigger, resource, f.Epoch, f.Token, epoch, token)
	}
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return dbErr("fencing: guard %q: %w", resource, err)
	}
	// Stale. Read the winning fence for the error; this runs only on the
	// rejection path, so the accepted path stays one statement.
	se := &StaleTokenError{Resource: fmt.Sprintf("%q", resource), Epoch: f.Epoch, Token: f.Token, Holder: f.Holder}
	var stored int64
	var holder *string
	if tx.QueryRow(ctx, t.storedSQL, resource).Scan(&se.StoredEpoch, &stored, &holder) == nil {
		se.Stored = distlock.Token(stored)
		if holder != nil {
			se.StoredHolder = *holder
		}
	}
	return se
}

// WithGuard begins a transaction on db, guards resource with f as its first
// statement (see Guard), runs fn with the transaction and commits. It rolls
// back, and returns the error, if the guard refuses the fence
// (ErrStaleToken), fn returns an error (returned as is), or fn panics (the
// panic goes on after the rollback). If Commit fails its error is returned; as with any commit,
// a connection lost during it leaves the outcome unknown.
func (t *Table) WithGuard(ctx context.Context, db Beginner, resource string, f distlock.Fence, fn func(pgx.Tx) error) (err error) {
	if err := checkCall(ctx, db); err != nil {
		return err
	}
	if err := checkResource(resource, f); err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil function")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return dbErr("fencing: begin: %w", err)
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
	if err := t.Guard(ctx, tx, resource, f); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		done = true // a failed commit ends the transaction
		return dbErr("fencing: commit %q: %w", resource, err)
	}
	done = true
	return nil
}

// Migrate creates DefaultTable if it does not exist, or upgrades it (see
// Table.Create).
func Migrate(ctx context.Context, db DB) error { return defaultTable.Create(ctx, db) }

// Guard is Table.Guard on DefaultTable.
func Guard(ctx context.Context, tx pgx.Tx, resource string, f distlock.Fence) error {
	return defaultTable.Guard(ctx, tx, resource, f)
}

// WithGuard is Table.WithGuard on DefaultTable.
func WithGuard(ctx context.Context, db Beginner, resource string, f distlock.Fence, fn func(pgx.Tx) error) error {
	return defaultTable.WithGuard(ctx, db, resource, f, fn)
}

func checkGuard(ctx context.Context, tx pgx.Tx, resource string, f distlock.Fence) error {
	if err := checkCall(ctx, tx); err != nil {
		return err
	}
	return checkResource(resource, f)
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

func checkResource(resource string, f distlock.Fence) error {
	// Resources are usually lock keys, so the same rules apply; they also
	// keep NUL bytes, which text columns refuse, out of the statement.
	if err := distlock.ValidateKey(resource); err != nil {
		return invalid("resource: %w", err)
	}
	return checkFence(f)
}

// maxHolder is the longest Fence.Holder accepted, in bytes: ids are short
// (Lease.Fence gives 24 hex digits), and a bound keeps fence rows small.
const maxHolder = 255

func checkFence(f distlock.Fence) error {
	switch {
	case f.Epoch < 0:
		return invalid("fence epoch %d is negative", f.Epoch)
	case f.Token <= 0:
		// Every backend's tokens are positive; zero is an unset Token.
		return invalid("token %d is not positive", f.Token)
	case f.Holder == "":
		// Without a holder an equal token cannot be told apart from
		// another holder's: take the fence from Lease.Fence.
		return invalid("empty fence holder (use Lease.Fence)")
	case len(f.Holder) > maxHolder:
		return invalid("fence holder is %d bytes, more than %d", len(f.Holder), maxHolder)
	case !utf8.ValidString(f.Holder) || strings.IndexByte(f.Holder, 0) >= 0:
		// A text column refuses both; say so before the database does.
		return invalid("fence holder %q is not UTF-8 text without NUL bytes", f.Holder)
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
