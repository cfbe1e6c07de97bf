// Package pgerr sorts PostgreSQL client errors for the packages that talk
// to PostgreSQL (fencing, postgres): refusals that retrying cannot help.
package pgerr

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/driver/urlparam"
)

// deniedCodes are the SQLSTATEs of a database refusing the role:
// invalid_password (28P01), invalid_authorization_specification (28000: no
// pg_hba.conf entry, a role that may not log in, a client certificate
// refused) and insufficient_privilege (42501).
var deniedCodes = map[string]bool{"28P01": true, "28000": true, "42501": true}

// Denied reports whether err is the database refusing the role, or the
// client refusing the server's certificate.
func Denied(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return deniedCodes[pgErr.Code]
	}
	return urlparam.CertificateRefused(err)
}

// Answered reports whether err is an answer of a server at work (a
// *pgconn.PgError other than a connection failure, a server shutting down
// or starting up, or too many connections): retrying would not change it.
func Answered(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	c := pgErr.Code
	return !strings.HasPrefix(c, "08") && !strings.HasPrefix(c, "57P") && c != "53300"
}

// Conflict reports whether err is a serialization failure or a deadlock
// (40001, 40P01): the statement changed nothing, and may be run again.
func Conflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
