package readme_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/examples/internal/backendtest"
	"github.com/distlock/distlock/internal/testserver"
)

// connect is the pool the snippet writes through.
func connect(ctx context.Context) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	return pool
}

// done reports the snippet's result; TestExampleRuns replaces it.
var done = func(err error) {
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("report written")
}

// writeReport is the guarded work: a row written in the transaction the
// fence commits with.
func writeReport(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS nightly_report (n serial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO nightly_report DEFAULT VALUES`)
	return err
}

// TestREADMESnippet checks that the Go block under "## Fifteen lines" in
// the repository's README is this package's import block followed by the
// body of Example's function literal.
func TestREADMESnippet(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippet, err := fencedBlock(string(readme), "## Fifteen lines", "```go")
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	src, err := os.ReadFile("readme_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	imports, err := between(string(src), "import (\n", "\n)\n")
	if err != nil {
		t.Fatalf("readme_example_test.go: %v", err)
	}
	body, err := between(string(src), "\tdone(func() error {\n", "\n\t}())\n")
	if err != nil {
		t.Fatalf("readme_example_test.go: %v", err)
	}
	lines := strings.Split(body, "\n")
	for i, l := range lines {
		if l != "" && !strings.HasPrefix(l, "\t\t") {
			t.Fatalf("readme_example_test.go: body line %q is not indented by two tabs", l)
		}
		lines[i] = strings.TrimPrefix(l, "\t\t")
	}
	want := "import (\n" + imports + "\n)\n\n" + strings.Join(lines, "\n") + "\n"
	if snippet == want {
		return
	}
	got, exp := strings.Split(snippet, "\n"), strings.Split(want, "\n")
	for i := range max(len(got), len(exp)) {
		var g, e string
		if i < len(got) {
			g = got[i]
		}
		if i < len(exp) {
			e = exp[i]
		}
		if g != e {
			t.Fatalf("README.md's \"Fifteen lines\" differs from readme_example_test.go at snippet line %d:\nREADME: %q\ncode:   %q\n\nthe snippet should be:\n%s", i+1, g, e, want)
		}
	}
}

// fencedBlock returns the text of the first fenced block opened by the line
// open after the line heading.
func fencedBlock(doc, heading, open string) (string, error) {
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", fmt.Errorf("no line %q", heading)
	}
	if next := strings.Index(rest, "\n## "); next >= 0 {
		rest = rest[:next]
	}
	_, rest, ok = strings.Cut(rest, open+"\n")
	if !ok {
		return "", fmt.Errorf("no %s block under %q", open, heading)
	}
	block, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		return "", fmt.Errorf("the %s block under %q is not closed", open, heading)
	}
	return block, nil
}

// between returns the text of s after the first start and before the next
// end.
func between(s, start, end string) (string, error) {
	_, rest, ok := strings.Cut(s, start)
	if !ok {
		return "", fmt.Errorf("no %q", start)
	}
	in, _, ok := strings.Cut(rest, end)
	if !ok {
		return "", fmt.Errorf("no %q after %q", end, start)
	}
	return in, nil
}

// TestExampleRuns runs the snippet against a real Redis and PostgreSQL: the
// report is written once per run under the fence, and with DISTLOCK_URL
// unset Open fails with ErrInvalidURL, as the snippet's comment says.
func TestExampleRuns(t *testing.T) {
	dsn := backendtest.Postgres(t)(t)
	redis := testserver.Redis(t)
	t.Setenv("DATABASE_URL", dsn)
	var got []error
	done = func(err error) { got = append(got, err) }

	t.Setenv("DISTLOCK_URL", "redis://"+redis.Addr())
	Example()
	Example()
	t.Setenv("DISTLOCK_URL", "")
	Example()
	if len(got) != 3 || got[0] != nil || got[1] != nil {
		t.Fatalf("runs with a Redis URL: %v, want no errors", got)
	}
	if !errors.Is(got[2], distlock.ErrInvalidURL) {
		t.Errorf("run with DISTLOCK_URL unset: %v, want ErrInvalidURL", got[2])
	}

	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var reports, token int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM nightly_report`).Scan(&reports); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT token FROM distlock_fence WHERE resource = 'report'`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	if reports != 2 || token <= 0 {
		t.Fatalf("%d reports written, fence token %d: want 2 reports and a positive token", reports, token)
	}
}
