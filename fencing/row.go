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
// table needs a token column, e.g.
//
//	ALTER TABLE accounts ADD COLUMN fence bigint NOT NULL DEFAULT 0;
type RowUpdate struct {
	// Table is the table name, optionally schema-qualified:
	// pgx.Identifier{"accounts"} or pgx.Identifier{"app", "accounts"}.
	Table pgx.Identifier
	// Fence is the bigint column holding the highest token that wrote the
	// row (NULL counts as 0).
	Fence string
	// Key picks the row: column = value for each entry, ANDed. It must
	// identify at most one row and its values must not be NULL.
	Key []Column
	// Set lists the columns to write. Empty claims the fence only, which is
	// how to raise it right after acquiring, before reading the row.
	Set []Column
}

// UpdateRow runs, as one statement,
//
//	UPDATE table SET set..., fence = token WHERE key... AND fence <= token
//
// and returns nil if the row was written. Zero rows written means either the
// row's fence is ahead of token — a *StaleTokenError matching ErrStaleToken —
// or no row matches the key, ErrRowNotFound; a second read, only on this
// failure path, tells which (in a concurrent race between the two statements
// it reports what it then sees). db may be a pool, a connection or a
// transaction; inside a transaction, a stale error leaves it usable, but you
// will normally roll it back.
func UpdateRow(ctx context.Context, db DB, u RowUpdate, token distlock.Token) error {
	if err := checkCall(ctx, db); err != nil {
		return err
	}
	if err := checkToken(token); err != nil {
		return err
	}
	update, check, args, err := u.build(token)
	if err != nil {
		return err
	}
	tag, err := db.Exec(ctx, update, args...)
	if err != nil {
		return fmt.Errorf("fencing: update %s: %w", u.describe(), err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var stored int64
	err = db.QueryRow(ctx, check, args[len(u.Set)+1:]...).Scan(&stored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", ErrRowNotFound, u.describe())
	case err != nil:
		// Nothing was written; only the reason is unknown.
		return fmt.Errorf("fencing: update %s wrote no row (stale token or no such row; reading which failed: %w)", u.describe(), err)
	case distlock.Token(stored) > token:
		return &StaleTokenError{Resource: u.describe(), Token: token, Stored: distlock.Token(stored)}
	default:
		// The row appeared, or its fence fell back, after the update ran.
		return fmt.Errorf("%w when the update ran: %s", ErrRowNotFound, u.describe())
	}
}

// build returns the UPDATE, the fence read for the failure path, and the
// arguments: the Set values, the token, then the Key values (the read uses
// only the Key values, so it shares the tail of the slice).
func (u *RowUpdate) build(token distlock.Token) (update, check string, args []any, err error) {
	if len(u.Table) == 0 || len(u.Table) > 3 {
		return "", "", nil, invalid("table name needs 1 to 3 parts, got %d", len(u.Table))
	}
	for _, p := range u.Table {
		if err := checkIdent(p); err != nil {
			return "", "", nil, invalid("table name: %w", err)
		}
	}
	if err := checkIdent(u.Fence); err != nil {
		return "", "", nil, invalid("fence column: %w", err)
	}
	if len(u.Key) == 0 {
		// Without a key the UPDATE would write every row.
		return "", "", nil, invalid("no key columns")
	}
	seen := map[string]bool{u.Fence: true}
	for _, c := range u.Set {
		if err := checkIdent(c.Name); err != nil {
			return "", "", nil, invalid("set column: %w", err)
		}
		if seen[c.Name] {
			return "", "", nil, invalid("column %q is set twice or is the fence column", c.Name)
		}
		seen[c.Name] = true
	}
	for _, c := range u.Key {
		if err := checkIdent(c.Name); err != nil {
			return "", "", nil, invalid("key column: %w", err)
		}
	}

	table := u.Table.Sanitize()
	fence := pgx.Identifier{u.Fence}.Sanitize()
	args = make([]any, 0, len(u.Set)+1+len(u.Key))
	var b strings.Builder
	b.WriteString("UPDATE " + table + " SET ")
	for _, c := range u.Set {
		args = append(args, c.Value)
		b.WriteString(pgx.Identifier{c.Name}.Sanitize() + " = $" + strconv.Itoa(len(args)) + ", ")
	}
	args = append(args, int64(token))
	tok := "$" + strconv.Itoa(len(args))
	b.WriteString(fence + " = " + tok + " WHERE ")
	var where strings.Builder
	for i, c := range u.Key {
		args = append(args, c.Value)
		if i > 0 {
			where.WriteString(" AND ")
		}
		where.WriteString(pgx.Identifier{c.Name}.Sanitize() + " = $" + strconv.Itoa(len(args)))
	}
	b.WriteString(where.String() + " AND COALESCE(" + fence + ", 0) <= " + tok)

	// The read numbers its Key placeholders from $1.
	var cw strings.Builder
	for i, c := range u.Key {
		if i > 0 {
			cw.WriteString(" AND ")
		}
		cw.WriteString(pgx.Identifier{c.Name}.Sanitize() + " = $" + strconv.Itoa(i+1))
	}
	check = "SELECT COALESCE(" + fence + ", 0) FROM " + table + " WHERE " + cw.String() + " LIMIT 1"
	return b.String(), check, args, nil
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
