package testserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres starts a PostgreSQL server with trust authentication for the user
// "postgres"; connect with DSN. fsync is on unless WithPostgresFsync(false).
func Postgres(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := newConfig(opts)
	sp, err := pgSpec(cfg)
	return startGroup(t, cfg, 1, mustSpec(t, sp, err))[0]
}

// SecuredPostgres is a PostgreSQL server that takes TCP clients only over
// TLS (hostssl) and only with a SCRAM-SHA-256 password: no trust, no plain
// TCP, no Unix socket. Its DSN is the superuser's; RoleDSN gives another
// role's.
type SecuredPostgres struct {
	*Server
	// CA issued the server's certificate; clients trust it (sslrootcert).
	CA *CA
	// Password is the superuser postgres's.
	Password string
	// Migrator (fence_owner) has USAGE and CREATE on schema public, so it
	// owns the tables it makes: the role that runs fencing.Migrate.
	Migrator Role
	// Runtime (app) has USAGE on schema public and nothing else until
	// GrantRuntime: the application's least-privilege role.
	Runtime Role
}

// Role is a login role of a SecuredPostgres. Its password holds characters
// a DSN must escape; DSN is its RoleDSN.
type Role struct{ Name, Password, DSN string }

// PostgresSecured starts a PostgreSQL server with ssl=on (a certificate of
// a new CA for 127.0.0.1 and localhost), password_encryption =
// scram-sha-256, and a pg_hba.conf whose only entries are hostssl ...
// scram-sha-256 for loopback; PUBLIC has no rights on schema public. It
// makes the roles Migrator and Runtime; roles the test creates with a
// PASSWORD log in with RoleDSN.
func PostgresSecured(t testing.TB, opts ...Option) *SecuredPostgres {
	t.Helper()
	cfg := newConfig(opts)
	ca := NewCA(t)
	sec := &pgSecurity{ca: ca, cert: ca.Server(t, "postgres"), password: randomPassword(t)}
	sp, err := pgSpecWith(cfg, sec)
	s := startGroup(t, cfg, 1, mustSpec(t, sp, err))[0]
	p := &SecuredPostgres{Server: s, CA: ca, Password: sec.password}
	p.Migrator = p.role(t, "fence_owner")
	p.Runtime = p.role(t, "app")
	p.exec(t, s.DSN(),
		`REVOKE ALL ON SCHEMA public FROM PUBLIC`,
		`CREATE ROLE fence_owner LOGIN PASSWORD `+quote(p.Migrator.Password),
		`GRANT USAGE, CREATE ON SCHEMA public TO fence_owner`,
		`CREATE ROLE app LOGIN PASSWORD `+quote(p.Runtime.Password),
		`GRANT USAGE ON SCHEMA public TO app`)
	return p
}

// RoleDSN returns the DSN of user with password on the secured server:
// TLS with the server's certificate verified against the CA
// (sslmode=verify-full, sslrootcert).
func (p *SecuredPostgres) RoleDSN(user, password string) string {
	return securedDSN(p.Addr(), user, password, p.CA.File)
}

func (p *SecuredPostgres) role(t testing.TB, name string) Role {
	pw := randomPassword(t) + " :/@?'"
	return Role{Name: name, Password: pw, DSN: p.RoleDSN(name, pw)}
}

// GrantRuntime gives Runtime what the fencing guard needs on each of the
// Migrator's tables: SELECT, INSERT, UPDATE, granted by the Migrator.
func (p *SecuredPostgres) GrantRuntime(t testing.TB, tables ...string) {
	t.Helper()
	var stmts []string
	for _, table := range tables {
		stmts = append(stmts, "GRANT SELECT, INSERT, UPDATE ON "+pgx.Identifier{table}.Sanitize()+" TO app")
	}
	p.exec(t, p.Migrator.DSN, stmts...)
}

// exec runs stmts on one connection of dsn.
func (p *SecuredPostgres) exec(t testing.TB, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("testserver: connect to the secured PostgreSQL: %v", err)
	}
	defer conn.Close(context.Background())
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			shown, _, _ := strings.Cut(stmt, " PASSWORD ") // not the password
			t.Fatalf("testserver: %s: %v", shown, err)
		}
	}
}

// quote is s as an SQL string literal (standard_conforming_strings is on).
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func securedDSN(addr, user, password, caFile string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: addr, Path: "/postgres",
		RawQuery: url.Values{"sslmode": {"verify-full"}, "sslrootcert": {caFile}}.Encode()}
	return u.String()
}

func randomPassword(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// pgSecurity is what a secured server needs beyond a plain one.
type pgSecurity struct {
	ca       *CA
	cert     KeyPair
	password string // the superuser's
}

// pgHBA admits TLS connections with a SCRAM password, from loopback only.
// Nothing else has an entry, so plain TCP and the Unix socket are refused
// (SQLSTATE 28000), and no line trusts anyone.
const pgHBA = `# TYPE  DATABASE  USER  ADDRESS       METHOD
hostssl all       all   127.0.0.1/32  scram-sha-256
hostssl all       all   ::1/128       scram-sha-256
`

// files writes into dir (the server's, which its OS user owns) what the
// secured server reads: the superuser's password for initdb, the
// certificates, and the key, which PostgreSQL refuses unless its owner is
// the server's user and nobody else may read it. It returns the server
// settings that use them.
func (sec *pgSecurity) files(dir string, cred *syscall.Credential) (pwfile string, settings []string, err error) {
	copies := []struct {
		from, to string
		mode     os.FileMode
		data     []byte
	}{
		{to: "pwfile", mode: 0o600, data: []byte(sec.password + "\n")},
		{from: sec.cert.CertFile, to: "server.crt", mode: 0o644},
		{from: sec.cert.KeyFile, to: "server.key", mode: 0o600},
		{from: sec.ca.File, to: "root.crt", mode: 0o644},
	}
	for _, c := range copies {
		data := c.data
		if c.from != "" {
			if data, err = os.ReadFile(c.from); err != nil {
				return "", nil, err
			}
		}
		if err := writeOwned(filepath.Join(dir, c.to), data, c.mode, cred); err != nil {
			return "", nil, err
		}
	}
	settings = []string{"ssl=on", "ssl_cert_file=" + filepath.Join(dir, "server.crt"),
		"ssl_key_file=" + filepath.Join(dir, "server.key"), "ssl_ca_file=" + filepath.Join(dir, "root.crt"),
		"password_encryption=scram-sha-256"}
	return filepath.Join(dir, "pwfile"), settings, nil
}

// writeOwned writes a file with mode perm, owned by cred's user when cred
// is not nil.
func writeOwned(path string, data []byte, perm os.FileMode, cred *syscall.Credential) error {
	if err := os.WriteFile(path, data, perm); err != nil {
		return err
	}
	if cred != nil {
		return os.Chown(path, int(cred.Uid), int(cred.Gid))
	}
	return nil
}

// pgSpec describes one PostgreSQL server under cfg.
func pgSpec(cfg *config) (spec, error) { return pgSpecWith(cfg, nil) }

// pgSpecWith describes one PostgreSQL server under cfg, secured by sec
// unless sec is nil.
func pgSpecWith(cfg *config, sec *pgSecurity) (spec, error) {
	postgres, cred, err := pgBinary()
	if err != nil {
		return spec{}, err
	}
	return spec{
		kind: "postgres", nports: 1, timeout: 15 * time.Second,
		setup: func(ms []*Server) error { return pgSetup(ms[0], postgres, cred, cfg.pgFsync, sec) },
	}, nil
}

// pgBinary finds the postgres binary and the OS user to run it as: when
// the tests run as root (as in containers), postgres refuses to, so initdb
// and the server run as the postgres OS user instead (cred non-nil).
func pgBinary() (postgres string, cred *syscall.Credential, err error) {
	postgres, err = lookBinary("postgres", append(pgBinaries(), "postgres")...)
	if err != nil {
		return "", nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, &missingError{"running as root, and there is no postgres user to run PostgreSQL as"}
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return postgres, cred, nil
}

// pgSetup makes a new cluster in s's directory with initdb and fills in how
// to start the server and when it is ready.
func pgSetup(s *Server, postgres string, cred *syscall.Credential, fsync bool, sec *pgSecurity) error {
	if err := giveDir(s, cred); err != nil {
		return err
	}
	data := filepath.Join(s.dir, "data")
	// --no-sync skips initdb's final flush of the new cluster to disk,
	// which costs seconds and only matters if the OS crashes; the server
	// itself runs with the fsync setting asked for.
	initArgs := []string{"-D", data, "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"}
	s.dsn = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", s.Addr())
	var settings []string
	if sec == nil {
		initArgs = append(initArgs, "--auth=trust")
	} else {
		pwfile, set, err := sec.files(s.dir, cred)
		if err != nil {
			return err
		}
		initArgs = append(initArgs, "--auth=scram-sha-256", "--pwfile="+pwfile)
		settings = set
		s.dsn = securedDSN(s.Addr(), "postgres", sec.password, sec.ca.File)
	}
	initdb := filepath.Join(filepath.Dir(postgres), "initdb")
	if err := s.runOnce(60*time.Second, cred, initdb, initArgs...); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, s.logTail(logTail))
	}
	if sec != nil {
		// Replaces initdb's file, keeping its owner (the server's user).
		if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(pgHBA), 0o600); err != nil {
			return err
		}
	}
	pgConfigure(s, postgres, cred, fsync, settings)
	return nil
}

// giveDir lets cred's user (if any) through s's parent and every directory
// above it inside the temp root — t.TempDir and os.MkdirTemp make them
// root's with mode 0700, one level or several deep — and gives it s's
// directory.
func giveDir(s *Server, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	root := filepath.Clean(os.TempDir()) + string(filepath.Separator)
	for d := filepath.Dir(s.dir); ; d = filepath.Dir(d) {
		if err := letThrough(d); err != nil {
			return err
		}
		if !strings.HasPrefix(filepath.Dir(d), root) {
			break
		}
	}
	return os.Chown(s.dir, int(cred.Uid), int(cred.Gid))
}

// letThrough adds search (not read) permission for others to directory d.
func letThrough(d string) error {
	fi, err := os.Stat(d)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o001 != 0 {
		return nil
	}
	return os.Chmod(d, fi.Mode().Perm()|0o011)
}

// pgConfigure fills in how to start s on the cluster in its data
// directory, and when it is ready.
func pgConfigure(s *Server, postgres string, cred *syscall.Credential, fsync bool, settings []string) {
	data := filepath.Join(s.dir, "data")
	// A Unix socket path is limited to 107 bytes; with a long test name
	// there is none, which is fine since clients use TCP.
	sockDir := s.dir
	if len(sockDir)+len("/.s.PGSQL.65535") > 107 {
		sockDir = ""
	}
	s.bin, s.cred, s.stopSig = postgres, cred, syscall.SIGINT // SIGINT: fast shutdown; SIGTERM waits for clients
	s.args = []string{"-D", data, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-k", sockDir, "-c", "fsync=" + onOff(fsync)}
	for _, set := range settings {
		s.args = append(s.args, "-c", set)
	}
	s.ready = func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, s.dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// pgBinaries returns Debian's postgres binaries, newest version first.
func pgBinaries() []string {
	paths, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	version := func(p string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(p))), 64)
		return v
	}
	sort.Slice(paths, func(i, j int) bool { return version(paths[i]) > version(paths[j]) })
	return paths
}

// runOnce runs a helper command to completion with output to the server's log.
func (s *Server) runOnce(timeout time.Duration, cred *syscall.Credential, bin string, args ...string) error {
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, logf, logf
	cmd.SysProcAttr = sysProcAttr(cred)
	return cmd.Run()
}
