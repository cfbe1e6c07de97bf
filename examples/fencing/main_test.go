package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/examples/internal/backendtest"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestDemo runs the program as a user would, against a real PostgreSQL and
// each lock backend on real servers; every backend gets a database of its
// own.
func TestDemo(t *testing.T) {
	newDB := backendtest.Postgres(t)
	backendtest.Each(t, nil, func(t *testing.T, url string) {
		// The second run must tell the same story on the rows the first
		// left, fence row included (mem:// tokens start from the wall clock
		// in each process).
		runs := 1
		if strings.HasPrefix(url, "mem://") {
			runs = 2
		}
		testStory(t, newDB(t), url, runs)
	})
	t.Run("DSNFlagWinsOverEnv", func(t *testing.T) { testDSNFlag(t, newDB(t)) })
	t.Run("BadLockURL", func(t *testing.T) { testBadLockURL(t, newDB(t)) })
}

func testStory(t *testing.T, dsn, url string, runs int) {
	ctx := t.Context()
	for run := range runs {
		var out, errOut bytes.Buffer
		// The lock URL from the environment, as DISTLOCK_URL=… go run would.
		code := cli(ctx, []string{"-ttl", "300ms"}, env(map[string]string{"DATABASE_URL": dsn, "DISTLOCK_URL": url}), &out, &errOut)
		t.Logf("run %d output:\n%s", run+1, out.String())
		if code != 0 {
			t.Fatalf("run %d: exit code %d: %s", run+1, code, errOut.String())
		}
		for _, want := range []string{"lock backend " + url + ",", "A: REJECTED: fencing: stale token", "balance 150, last written by B", "balance 110, last written by A: B's +50 is lost"} {
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
	code := cli(context.Background(), []string{"-dsn", dsn, "-url", "mem://dsn-flag", "-ttl", "100ms"},
		env(map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "DISTLOCK_URL": "nosuch://x"}), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, errOut.String())
	}
}

func testBadLockURL(t *testing.T, dsn string) {
	var out, errOut bytes.Buffer
	code := cli(context.Background(), []string{"-url", "nosuch://x"}, env(map[string]string{"DATABASE_URL": dsn}), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "nosuch") {
		t.Fatalf("exit code %d, stderr %q: want 1 and a message naming the scheme", code, errOut.String())
	}
}

func TestUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want []string
	}{
		{"help", []string{"-h"}, nil, 0, []string{"-dsn", "$DATABASE_URL", "$DISTLOCK_URL, else mem://"}},
		{"bad TTL", []string{"-ttl", "0s"}, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/x"}, 2, []string{"-ttl"}},
		{"unknown flag", []string{"-nope"}, nil, 2, []string{"-nope"}},
		{"extra argument", []string{"-dsn", "postgres://x@127.0.0.1/x", "extra"}, nil, 2, []string{"extra"}},
		{"bad DSN", []string{"-dsn", "postgres://%zz"}, nil, 1, []string{"bad -dsn"}},
		// No database named: say how to get one, start nothing.
		{"no DSN", nil, nil, 2, []string{"no PostgreSQL given", "-dsn", "DATABASE_URL", "docker run", "initdb", "README.md"}},
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
			if strings.Contains(errOut.String(), "help requested") {
				t.Errorf("stderr %q mentions \"help requested\"", errOut.String())
			}
			if out.Len() > 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}
