package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/internal/testserver"
)

// fenceEnv sets the environment distlock run gives its command.
func fenceEnv(t *testing.T, key, token, holder string) {
	t.Setenv("DISTLOCK_KEY", key)
	t.Setenv("DISTLOCK_TOKEN", token)
	t.Setenv("DISTLOCK_HOLDER", holder)
	t.Setenv("DISTLOCK_FENCE_EPOCH", "")
}

// writtenRows returns the values in table written, in order.
func writtenRows(t *testing.T, dsn string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	r, err := conn.Query(ctx, "SELECT v FROM written ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFence: the write commits with a current token and changes nothing
// with a stale one; each outcome has its exit code.
func TestFence(t *testing.T) {
	pg := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	t.Setenv("DATABASE_URL", "")
	fenceEnv(t, "job", "5", "holder-a")
	setup := runCLI(t, "fence", "--dsn", pg.DSN(), "--create", "--resource", "setup",
		"--", "CREATE TABLE written (n serial PRIMARY KEY, v text NOT NULL)")
	if setup.code != 0 {
		t.Fatalf("setup: code %d\n%s", setup.code, setup.stderr)
	}
	insert := func(v string) []string {
		return []string{"fence", "--dsn", pg.DSN(), "--", fmt.Sprintf("INSERT INTO written (v) VALUES ('%s')", v)}
	}
	for _, tc := range []struct {
		name, token, holder string
		args                []string
		code                int
	}{
		{"first token", "5", "holder-a", insert("a5"), exitOK},
		{"same holder again", "5", "holder-a", insert("a5-again"), exitOK},
		{"larger token", "7", "holder-b", insert("b7"), exitOK},
		{"stale token", "6", "holder-c", insert("c6-stale"), exitStale},
		{"same token, other holder", "7", "holder-d", insert("d7-stale"), exitStale},
		{"bad SQL", "8", "holder-e", []string{"fence", "--dsn", pg.DSN(), "--", "INSERT INTO nosuch VALUES (1)"}, exitFailure},
		// The failed SQL rolled the fence back too: 8 is still new.
		{"after a rollback", "8", "holder-f", insert("f8"), exitOK},
		{"several statements", "8", "holder-f", insert("f8-1'); INSERT INTO written (v) VALUES ('f8-2"), exitOK},
		{"unreachable database", "9", "holder-g", []string{"fence", "--dsn", "postgres://postgres@" + closedAddr(t) + "/postgres?sslmode=disable", "--", "SELECT 1"}, exitUnavailable},
		{"bad table name", "9", "holder-g", []string{"fence", "--dsn", pg.DSN(), "--table", "a.b.c.d", "--", "SELECT 1"}, exitUsage},
	} {
		fenceEnv(t, "job", tc.token, tc.holder)
		r := runCLI(t, tc.args...)
		if r.code != tc.code {
			t.Errorf("%s: code %d, want %d\n%s", tc.name, r.code, tc.code, r.stderr)
		}
	}
	want := "a5 a5-again b7 f8 f8-1 f8-2"
	if got := strings.Join(writtenRows(t, pg.DSN()), " "); got != want {
		t.Errorf("rows %q, want %q: a refused write committed, or an accepted one did not", got, want)
	}
}

// TestFenceUsage: the fence comes from distlock run's environment; without
// it, or without a database or SQL, fence exits 64 before connecting.
func TestFenceUsage(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	dsn := "postgres://postgres@" + closedAddr(t) + "/postgres" // never reached
	for _, tc := range []struct {
		name, key, token, holder string
		args                     []string
		want                     string
	}{
		{"no DISTLOCK_TOKEN", "k", "", "h", []string{"--dsn", dsn, "--", "SELECT 1"}, "DISTLOCK_TOKEN"},
		{"no DISTLOCK_HOLDER", "k", "3", "", []string{"--dsn", dsn, "--", "SELECT 1"}, "DISTLOCK_HOLDER"},
		{"no DISTLOCK_KEY", "", "3", "h", []string{"--dsn", dsn, "--", "SELECT 1"}, "DISTLOCK_KEY"},
		{"token not a number", "k", "x", "h", []string{"--dsn", dsn, "--", "SELECT 1"}, `DISTLOCK_TOKEN="x"`},
		{"token zero", "k", "0", "h", []string{"--dsn", dsn, "--", "SELECT 1"}, "positive"},
		{"no database", "k", "3", "h", []string{"--", "SELECT 1"}, "DATABASE_URL"},
		{"no SQL", "k", "3", "h", []string{"--dsn", dsn}, "one SQL argument"},
		{"two SQL arguments", "k", "3", "h", []string{"--dsn", dsn, "--", "SELECT 1", "SELECT 2"}, "one SQL argument"},
	} {
		fenceEnv(t, tc.key, tc.token, tc.holder)
		r := runCLI(t, append([]string{"fence"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: code %d, want %d and %q in\n%s", tc.name, r.code, exitUsage, tc.want, r.stderr)
		}
	}
}

// TestFenceUnderRun: distlock run's command reaches the fence through the
// environment run exports, and the job's exit status passes the
// refusal on.
func TestFenceUnderRun(t *testing.T) {
	pg := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	fenceEnv(t, "", "", "")
	t.Setenv("DATABASE_URL", pg.DSN())
	url, _ := memURL(t)
	if r := runCLI(t, "run", "-q", "--url", url, "--key", "setup", "--", binPath, "fence", "--create",
		"--", "CREATE TABLE written (n serial PRIMARY KEY, v text NOT NULL)"); r.code != 0 {
		t.Fatalf("setup: code %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, "run", "-q", "--url", url, "--key", "job", "--", binPath, "fence", "--",
		"INSERT INTO written (v) VALUES ('run')"); r.code != 0 {
		t.Fatalf("under run: code %d\n%s", r.code, r.stderr)
	}
	// A far larger token from elsewhere: the next run's token is stale.
	fenceEnv(t, "job", "4611686018427387904", "elsewhere") // 1<<62
	if r := runCLI(t, "fence", "--", "SELECT 1"); r.code != 0 {
		t.Fatalf("raising the fence: code %d\n%s", r.code, r.stderr)
	}
	fenceEnv(t, "", "", "")
	r := runCLI(t, "run", "-q", "--url", url, "--key", "job", "--", binPath, "fence", "--", "INSERT INTO written (v) VALUES ('stale')")
	if r.code != exitStale || !strings.Contains(r.stderr, "stale") {
		t.Errorf("stale under run: code %d, want %d\n%s", r.code, exitStale, r.stderr)
	}
	if got := strings.Join(writtenRows(t, pg.DSN()), " "); got != "run" {
		t.Errorf("rows %q, want just \"run\"", got)
	}
}
