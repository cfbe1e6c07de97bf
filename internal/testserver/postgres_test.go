package testserver

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The secured server lets a role in only over TLS, with its SCRAM password,
// when the client verifies the server's certificate; plain TCP, a wrong
// password and a client that trusts another CA are refused. The Migrator
// may create in schema public; the Runtime role may not, and reaches a
// table only once GrantRuntime has run.
func TestPostgresSecuredAdmitsOnlyTLSWithSCRAM(t *testing.T) {
	s := PostgresSecured(t)
	admin, err := pgx.Connect(ctxWithin(t, generous), s.DSN())
	if err != nil {
		t.Fatalf("the superuser over verify-full TLS: %v", err)
	}
	defer admin.Close(ctxWithin(t, generous))
	var ssl bool
	var verifier string
	err = admin.QueryRow(ctxWithin(t, generous), `SELECT (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()),
		(SELECT rolpassword FROM pg_authid WHERE rolname = 'app')`).Scan(&ssl, &verifier)
	if err != nil || !ssl || !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Fatalf("ssl %v, app's stored password %.14q…, %v: want TLS and a SCRAM verifier", ssl, verifier, err)
	}

	owner := connect(t, s.Migrator)
	if _, err := owner.Exec(ctxWithin(t, generous), `CREATE TABLE fence (n int)`); err != nil {
		t.Fatalf("the Migrator creates a table: %v", err)
	}
	app := connect(t, s.Runtime)
	wantDenied := func(what, sql string) {
		t.Helper()
		_, err := app.Exec(ctxWithin(t, generous), sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Fatalf("the Runtime role %s: %v, want insufficient_privilege", what, err)
		}
	}
	wantDenied("creates a table", `CREATE TABLE mine (n int)`)
	wantDenied("reads an ungranted table", `SELECT * FROM fence`)
	s.GrantRuntime(t, "fence")
	if _, err := app.Exec(ctxWithin(t, generous), `INSERT INTO fence VALUES (1); UPDATE fence SET n = 2; SELECT * FROM fence`); err != nil {
		t.Fatalf("the Runtime role after GrantRuntime: %v", err)
	}
	wantDenied("deletes", `DELETE FROM fence`)

	pw := s.Runtime.Password
	wantRefused(t, "plain TCP", strings.Replace(s.Runtime.DSN, "sslmode=verify-full", "sslmode=disable", 1), "28000", pw)
	wantRefused(t, "a wrong password", s.RoleDSN("app", "wrong"), "28P01", pw)
	u, err := url.Parse(s.Runtime.DSN)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslrootcert", NewCA(t).File)
	u.RawQuery = q.Encode()
	other := u.String()
	if c, err := pgx.Connect(ctxWithin(t, generous), other); err == nil {
		_ = c.Close(ctxWithin(t, generous))
		t.Fatal("a client that trusts another CA connected")
	} else if strings.Contains(err.Error(), pw) {
		t.Fatalf("the error names the password: %v", err)
	}
}

func connect(t *testing.T, r Role) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxWithin(t, generous), r.DSN)
	if err != nil {
		t.Fatalf("%s with its password over verify-full TLS: %v", r.Name, err)
	}
	t.Cleanup(func() { _ = c.Close(ctxWithin(t, generous)) })
	return c
}

func wantRefused(t *testing.T, what, dsn, code, pw string) {
	t.Helper()
	c, err := pgx.Connect(ctxWithin(t, generous), dsn)
	if err == nil {
		_ = c.Close(ctxWithin(t, generous))
		t.Fatalf("%s: connected", what)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code {
		t.Fatalf("%s: %v, want SQLSTATE %s", what, err, code)
	}
	if strings.Contains(err.Error(), pw) {
		t.Fatalf("%s: the error names the password: %v", what, err)
	}
}
