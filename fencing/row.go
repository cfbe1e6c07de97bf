package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
)

// Column is a column name with a value to write or to match. Values are
// passed as statement arguments, never spliced into the SQL.
type Column struct {
	Name  string
	Value any
}

// RowUpdate is a fenced UPDATE of one row of the caller's own table, for hot
// rows where a separate fence row would be a second point of contention. The
// table needs a token column and a holder column, e.g.
//
//	ALTER TABLE accounts ADD COLUMN fence bigint NOT NULL DEFAULT 0,
//	                     ADD COLUMN fence_holder text;
type RowUpdate struct {
	// Table is the table name, optionally schema-qualified:
	// pgx.Identifier{"accounts"} or pgx.Identifier{"app", "accounts"}.
	Table pgx.Identifier
	// Fence is the bigint column holding the highest token that wrote the
	// row (NULL counts as 0).
	Fence string
	// Holder is the text column holding the holder of that token. It is
	// required: without it an equal token cannot be told apart — a token
	// handed out twice would let two holders write — and refusing equal
	// tokens outright (a strict <) would refuse a holder's own second
	// write, such as the write after its claim.
	Holder string
	// Epoch is the bigint column holding the fence epoch of that token
	// (NULL counts as 0), compared before the token. Without it only fences
	// of epoch 0 are accepted (any other is invalid input), and the row's
	// epoch is not read: every writer of a row must name the column before
	// any of them raises the epoch (see the package doc).
	Epoch string
	// Key picks the row: column = value for each entry, ANDed. It must
	// identify at most one row and its values must not be NULL.
	Key []Column
	// Set lists the columns to write. Empty claims the fence only, which is
	// how to raise it right after acquiring, before reading the row.
	Set []Column
}

// UpdateRow runs, as one statement,
//
//	UPDATE table SET set..., fence = f.Token, holder = f.Holder
//	WHERE key... AND (fence < f.Token OR (fence = f.Token AND holder = f.Holder))
//
// (with an Epoch column, (epoch, fence) pairs compare against (f.Epoch,
// f.Token) instead), and returns nil if the row was written: a larger token
// is accepted from anyone, an equal one only from the holder that wrote it
// (a NULL fence or epoch counts as 0; a NULL holder matches no one). Zero rows written means
// either the row's fence is ahead of f, or at f's token from another
// holder — a *StaleTokenError matching ErrStaleToken — or no row matches the
// key, ErrRowNotFound; a second read, only on this failure path, tells which
// (in a concurrent race between the two statements it reports what it then
// sees). db may be a pool, a connection or a transaction; inside a
// transaction, a stale error leaves it usable, but you will normally roll it
// back.
func UpdateRow(ctx context.Context, db DB, u RowUpdate, f distlock.Fence) error {
	if err := checkCall(ctx, db); err != nil {
		return err
	}
	if err := checkFence(f); err != nil {
		return err
	}
	update, check, args, err := u.build(f)
	if err != nil {
		return err
	}
	tag, err := db.Exec(ctx, update, args...)
	if err != nil {
		return dbErr("fencing: update %s: %w", u.describe(), err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var epoch, stored int64
	var holder *string // NULL: never written with a holder
	err = db.QueryRow(ctx, check, args[len(args)-len(u.Key):]...).Scan(&epoch, &stored, &holder)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", ErrRowNotFound, u.describe())
	case err != nil:
		// Nothing was written; only the reason is unknown.
		return dbErr("fencing: update %s wrote no row (stale token or no such row; reading which failed: %w)", u.describe(), err)
	case staleAgainst(f, epoch, distlock.Token(stored), holder):
		se := &StaleTokenError{Resource: u.describe(), Epoch: f.Epoch, Token: f.Token, Holder: f.Holder,
			StoredEpoch: epoch, Stored: distlock.Token(stored)}
		if holder != nil {
			se.StoredHolder = *holder
		}
		return se
	default:
		// The row appeared, or its fence fell back, after the update ran.
		return fmt.Errorf("%w when the update ran: %s", ErrRowNotFound, u.describe())
	}
}

// staleAgainst reports whether f is refused by a stored (epoch, token) and
// holder: a larger pair, or an equal one from another holder.
func staleAgainst(f distlock.Fence, epoch int64, token distlock.Token, holder *string) bool {
	switch {
	case epoch != f.Epoch:
		return epoch > f.Epoch
	case token != f.Token:
		return token > f.Token
	}
	return holder == nil || *holder != f.Holder
}

// validate checks the update's names before any SQL is written: every
// identifier valid, no column written twice, a key to select the row.
func (u *RowUpdate) validate(f distlock.Fence) error {
	if len(u.Table) == 0 || len(u.Table) > 3 {
		return invalid("table name needs 1 to 3 parts, got %d", len(u.Table))
	}
	for _, p := range u.Table {
		if err := checkIdent(p); err != nil {
			return invalid("table name: %w", err)
		}
	}
	if err := checkIdent(u.Fence); err != nil {
		return invalid("fence column: %w", err)
	}
	if err := checkIdent(u.Holder); err != nil {
		return invalid("holder column: %w", err)
	}
	if u.Holder == u.Fence {
		return invalid("holder column %q is the fence column", u.Holder)
	}
	if err := u.checkEpoch(f); err != nil {
		return err
	}
	if len(u.Key) == 0 {
		// Without a key the UPDATE would write every row.
		return invalid("no key columns")
	}
	return u.checkColumns()
}

// checkColumns checks the Set and Key column names.
func (u *RowUpdate) checkColumns() error {
	seen := map[string]bool{u.Fence: true, u.Holder: true, u.Epoch: u.Epoch != ""}
	for _, c := range u.Set {
		if err := checkIdent(c.Name); err != nil {
			return invalid("set column: %w", err)
		}
		if seen[c.Name] {
			return invalid("column %q is set twice or is the fence, holder or epoch column", c.Name)
		}
		seen[c.Name] = true
	}
	for _, c := range u.Key {
		if err := checkIdent(c.Name); err != nil {
			return invalid("key column: %w", err)
		}
	}
	return nil
}

// build returns the UPDATE, the fence read for the failure path, and the
// arguments: the Set values, the token, the holder, then the Key values (the
// read uses only the Key values, so it shares the tail of the slice).
func (u *RowUpdate) build(f distlock.Fence) (update, check string, args []any, err error) {
	if err := u.validate(f); err != nil {
		return "", "", nil, err
	}
	table := u.Table.Sanitize()
	fence := pgx.Identifier{u.Fence}.Sanitize()
	holder := pgx.Identifier{u.Holder}.Sanitize()
	args = make([]any, 0, len(u.Set)+2+len(u.Key))
	var b strings.Builder
	b.WriteString("UPDATE " + table + " SET ")
	for _, c := range u.Set {
		args = append(args, c.Value)
		b.WriteString(pgx.Identifier{c.Name}.Sanitize() + " = $" + strconv.Itoa(len(args)) + ", ")
	}
	args = append(args, int64(f.Token), f.Holder)
	tok, who := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
	b.WriteString(fence + " = " + tok + ", " + holder + " = " + who)
	// Without an epoch column the row's pairs are (0, fence), and only
	// epoch 0 fences get here (checkEpoch).
	mine, stored, storedEpoch := tok, "COALESCE("+fence+", 0)", "0"
	if u.Epoch != "" {
		args = append(args, f.Epoch)
		epoch := pgx.Identifier{u.Epoch}.Sanitize()
		b.WriteString(", " + epoch + " = $" + strconv.Itoa(len(args)))
		mine = "($" + strconv.Itoa(len(args)) + "::bigint, " + tok + "::bigint)"
		storedEpoch = "COALESCE(" + epoch + ", 0)"
		stored = "(" + storedEpoch + ", COALESCE(" + fence + ", 0))"
	}
	b.WriteString(" WHERE ")
	var where strings.Builder
	for i, c := range u.Key {
		args = append(args, c.Value)
		if i > 0 {
			where.WriteString(" AND ")
		}
		where.WriteString(pgx.Identifier{c.Name}.Sanitize() + " = $" + strconv.Itoa(len(args)))
	}
	// A NULL holder equals nothing: a row last written without one
	// accepts only a larger token.
	b.WriteString(where.String() + " AND (" + stored + " < " + mine +
		" OR (" + stored + " = " + mine + " AND " + holder + " = " + who + "))")

	// The read numbers its Key placeholders from $1.
	var cw strings.Builder
	for i, c := range u.Key {
		if i > 0 {
			cw.WriteString(" AND ")
		}
		cw.WriteString(pgx.Identifier{c.Name}.Sanitize() + " = $" + strconv.Itoa(i+1))
	}
	check = "SELECT " + storedEpoch + ", COALESCE(" + fence + ", 0), " + holder + " FROM " + table + " WHERE " + cw.String() + " LIMIT 1"
	return b.String(), check, args, nil
}

// checkEpoch refuses an epoch column that collides, and a fence of a
// non-zero epoch where the row has no epoch column to compare it with.
func (u *RowUpdate) checkEpoch(f distlock.Fence) error {
	if u.Epoch == "" {
		if f.Epoch != 0 {
			return invalid("fence epoch %d needs RowUpdate.Epoch, a bigint column of the row", f.Epoch)
		}
		return nil
	}
	if err := checkIdent(u.Epoch); err != nil {
		return invalid("epoch column: %w", err)
	}
	if u.Epoch == u.Fence || u.Epoch == u.Holder {
		return invalid("epoch column %q is the fence or holder column", u.Epoch)
	}
	return nil
}

// describe names the row for errors: table and key values.
func (u *RowUpdate) describe() string {
	var b strings.Builder
	b.WriteString(u.Table.Sanitize() + "(")
	for i, c := range u.Key {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%v", c.Name, c.Value)
	}
	b.WriteString(")")
	return b.String()
}
