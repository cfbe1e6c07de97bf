package testserver

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresReplica starts an asynchronous streaming replica of primary (a
// server from Postgres): a base backup taken with pg_basebackup, then a hot
// standby that streams primary's WAL. Pause it to make it lag; Promote
// makes it a primary.
func PostgresReplica(t testing.TB, primary *Server, opts ...Option) *Server {
	t.Helper()
	cfg := newConfig(opts)
	postgres, cred, err := pgBinary()
	sp := mustSpec(t, spec{kind: "postgres", nports: 1, timeout: 30 * time.Second, setup: func(ms []*Server) error {
		s := ms[0]
		if err := giveDir(s, cred); err != nil {
			return err
		}
		s.dsn = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", s.Addr())
		basebackup := filepath.Join(filepath.Dir(postgres), "pg_basebackup")
		err := s.runOnce(60*time.Second, cred, basebackup, "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port()),
			"-U", "postgres", "-D", filepath.Join(s.dir, "data"), "-R", "-X", "stream", "-c", "fast", "--no-sync")
		if err != nil {
			return fmt.Errorf("pg_basebackup: %w\n%s", err, s.logTail(logTail))
		}
		pgConfigure(s, postgres, cred, cfg.pgFsync, nil)
		return nil
	}}, err)
	return startGroup(t, cfg, 1, sp)[0]
}

// Promote makes the replica s a primary (pg_promote, waiting for it).
func (s *Server) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var done bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&done); err != nil {
		return err
	}
	if !done {
		return fmt.Errorf("testserver: %s not promoted within 60s", s.Addr())
	}
	return nil
}
