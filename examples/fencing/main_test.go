package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/internal/testserver"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestDemo runs the program as a user would against one real PostgreSQL.
func TestDemo(t *testing.T) {
	s := testserver.Postgres(t)
	t.Run("Story", func(t *testing.T) { testStory(t, s.DSN()) })
	t.Run("DSNFlagWinsOverEnv", func(t *testing.T) { testDSNFlag(t, s.DSN()) })
	t.Run("BadLockURL", func(t *testing.T) { testBadLockURL(t, s.DSN()) })
}

// testStory runs the demo twice: the second run must tell the same story
// on the rows the first left.
func testStory(t *testing.T, dsn string) {
	ctx := context.Background()
	for run := range 2 {
		var out, errOut bytes.Buffer
		code := cli(ctx, []string{"-ttl", "200ms"}, env(map[string]string{"DATABASE_URL": dsn}), &out, &errOut)
		t.Logf("run %d output:\n%s", run+1, out.String())
		if code != 0 {
			t.Fatalf("run %d: exit code %d: %s", run+1, code, errOut.String())
		}
		for _, want := range []string{"A: REJECTED: fencing: stale token", "balance 150, last written by B", "balance 110, last written by A: B's +50 is lost"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("run %d: output lacks %q", run+1, want)
			}
		}
	}
	// Check the database itself, not just what the program printed.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	var writer string
	if err := conn.QueryRow(ctx, `SELECT balance, last_writer FROM fencing_demo WHERE account = $1`, account).Scan(&n, &writer); err != nil {
		t.Fatal(err)
	}
	if n != 150 || writer != "B" {
		t.Fatalf("guarded row: balance %d by %s, want 150 by B", n, writer)
	}
}

func testDSNFlag(t *testing.T, dsn string) {
	var out, errOut bytes.Buffer
	code := cli(context.Background(), []string{"-dsn", dsn, "-ttl", "100ms"},
		env(map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want []string
	}{
		{"bad TTL", []string{"-ttl", "0s"}, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/x"}, 2, []string{"-ttl"}},
		{"unknown flag", []string{"-nope"}, nil, 2, []string{"-nope"}},
		{"bad DSN", []string{"-dsn", "postgres://%zz"}, nil, 1, []string{"bad -dsn"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := cli(context.Background(), c.args, env(c.env), &out, &errOut)
			if code != c.code {
				t.Fatalf("exit code %d, want %d (stderr: %s)", code, c.code, errOut.String())
			}
			for _, w := range c.want {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("stderr %q lacks %q", errOut.String(), w)
				}
			}
		})
	}
}

func testBadLockURL(t *testing.T, dsn string) {
	var out, errOut bytes.Buffer
	code := cli(context.Background(), []string{"-url", "nosuch://x"}, env(map[string]string{"DATABASE_URL": dsn}), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "nosuch") {
		t.Fatalf("exit code %d, stderr %q: want 1 and a message naming the scheme", code, errOut.String())
	}
}

// TestNoDSNStartsLocalServer: with no DSN the demo starts its own
// PostgreSQL, as the README's command promises.
func TestNoDSNStartsLocalServer(t *testing.T) {
	var out, errOut bytes.Buffer
	code := cli(context.Background(), []string{"-ttl", "200ms"}, env(nil), &out, &errOut)
	if code == 2 && strings.Contains(errOut.String(), "starting a local PostgreSQL failed") && os.Getenv("CI") != "true" {
		t.Skip(errOut.String())
	}
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "using a local PostgreSQL") {
		t.Fatalf("did not say which server it used:\n%s", out.String())
	}
}
