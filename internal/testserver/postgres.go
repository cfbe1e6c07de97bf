package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
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

// pgSpec describes one PostgreSQL server under cfg.
func pgSpec(cfg *config) (spec, error) {
	postgres, err := lookBinary("postgres", append(pgBinaries(), "postgres")...)
	if err != nil {
		return spec{}, err
	}
	initdb := filepath.Join(filepath.Dir(postgres), "initdb")

	// postgres refuses to run as root, so when the tests run as root (as in
	// containers) initdb and the server run as the postgres OS user instead.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return spec{}, &missingError{"running as root, and there is no postgres user to run PostgreSQL as"}
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}

	fsync := "off"
	if cfg.pgFsync {
		fsync = "on"
	}
	return spec{
		kind: "postgres", nports: 1, timeout: 15 * time.Second,
		setup: func(ms []*Server) error {
			s := ms[0]
			if cred != nil {
				// The test's temp dirs belong to root with mode 0700: let the
				// postgres user through the parent and give it the server's dir.
				if err := os.Chmod(filepath.Dir(s.dir), 0o711); err != nil {
					return err
				}
				if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
					return err
				}
			}
			data := filepath.Join(s.dir, "data")
			// --no-sync skips initdb's final flush of the new cluster to disk,
			// which costs seconds and only matters if the OS crashes; the server
			// itself runs with the fsync setting asked for.
			if err := s.runOnce(60*time.Second, cred, initdb, "-D", data, "-U", "postgres",
				"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
				return fmt.Errorf("initdb: %w\n%s", err, s.logTail(logTail))
			}
			// A Unix socket path is limited to 107 bytes; with a long test name
			// there is none, which is fine since clients use TCP.
			sockDir := s.dir
			if len(sockDir)+len("/.s.PGSQL.65535") > 107 {
				sockDir = ""
			}
			s.bin, s.cred, s.stopSig = postgres, cred, syscall.SIGINT // SIGINT: fast shutdown; SIGTERM waits for clients
			s.args = []string{"-D", data, "-p", strconv.Itoa(s.port),
				"-c", "listen_addresses=127.0.0.1", "-k", sockDir, "-c", "fsync=" + fsync}
			s.dsn = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", s.Addr())
			s.ready = func(ctx context.Context) error {
				conn, err := pgx.Connect(ctx, s.dsn)
				if err != nil {
					return err
				}
				defer conn.Close(context.Background())
				var one int
				return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
			}
			return nil
		},
	}, nil
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
