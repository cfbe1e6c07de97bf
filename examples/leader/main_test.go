package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/examples/internal/backendtest"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/memory"
)

// childEnv makes the test binary run the program itself (TestLeaderProcesses).
const childEnv = "LEADER_EXAMPLE_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main() // exits
	}
	os.Exit(m.Run())
}

const role = "jobs/compactor"

// TestLeader runs three instances in one program, each with its own Locker,
// and an observer in another, on every backend with real servers. Each
// leader resigns after three runs; the database must show one term at a
// time, tokens increasing, prompt hand-overs, and refuse a stale term's
// write.
func TestLeader(t *testing.T) {
	newDB := backendtest.Postgres(t)
	backendtest.Each(t, nil, func(t *testing.T, url string) {
		dsn := newDB(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var out, observed syncBuffer
		codes := make(chan int, 2)
		go func() {
			codes <- cli(ctx, []string{"-url", url, "-dsn", dsn, "-role", role, "-value", "w", "-instances", "3",
				"-every", "100ms", "-ttl", "3s", "-max-runs", "3"}, env(nil), &out, &out)
		}()
		// Only observing needs no database.
		go func() {
			codes <- cli(ctx, []string{"-observe", "-role", role}, env(map[string]string{"DISTLOCK_URL": url}), &observed, &observed)
		}()
		defer func() {
			if t.Failed() || testing.Verbose() {
				t.Logf("instances:\n%s\nobserver:\n%s", out.String(), observed.String())
			}
		}()

		db := connect(t, dsn)
		// Terms go on rotating until then, so an observer that started
		// late (a loaded machine) still sees two.
		waitFor(t, 90*time.Second, "four terms in the database and two leaders observed", func() bool {
			var n int
			err := db.QueryRow(t.Context(), `SELECT count(DISTINCT token) FROM leader_demo_runs`).Scan(&n)
			return err == nil && n >= 4 &&
				len(observedLine.FindAllString(observed.String(), -1)) >= 2 && len(observedLine.FindAllString(out.String(), -1)) >= 2
		})
		cancel()
		for range 2 {
			if code := <-codes; code != 0 {
				t.Fatalf("exit code %d", code)
			}
		}

		runs := readRuns(t, db)
		terms := checkOneTermAtATime(t, runs, 3)
		leaders := map[string]bool{}
		for i, tm := range terms {
			leaders[tm.leader] = true
			// A resignation hands over at once, not at the TTL (3s; a
			// term's lock would last at least 2s more when it stopped).
			if i > 0 && terms[i-1].runs == 3 && tm.first.Sub(terms[i-1].last) >= 1500*time.Millisecond {
				t.Errorf("term %d began %v after term %d's last run: that is the TTL, not a hand-over",
					tm.token, tm.first.Sub(terms[i-1].last), terms[i-1].token)
			}
		}
		if len(leaders) < 2 {
			t.Errorf("one instance led every term (%v): the others never took over", leaders)
		}
		checkObserved(t, "the observer", observed.String(), terms, 2)
		checkObserved(t, "the instances' observer", out.String(), terms, 2)
		for _, want := range []string{"backend " + url + " (", "w/0: campaigning", "w/1: campaigning", "w/2: campaigning", "(after 3 runs)", "(shutting down)"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
		checkStaleRefused(t, dsn, runs)
	})
}

// runRow is one row of leader_demo_runs.
type runRow struct {
	id     int64
	token  distlock.Token
	holder string
	leader string
	at     time.Time
}

// term is the runs of one term.
type term struct {
	token       distlock.Token
	leader      string
	runs        int
	first, last time.Time
}

func connect(t *testing.T, dsn string) *pgxpool.Pool {
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func readRuns(t *testing.T, db *pgxpool.Pool) []runRow {
	rows, err := db.Query(t.Context(), `SELECT id, token, holder, leader, at FROM leader_demo_runs WHERE role = $1 ORDER BY id`, role)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (runRow, error) {
		var x runRow
		err := r.Scan(&x.id, &x.token, &x.holder, &x.leader, &x.at)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// checkOneTermAtATime checks the runs in the order the database committed
// them (ids come from a sequence taken under the fence row's lock): tokens
// never go down, so a term never writes again once a later one has, and
// each token is one holder's. maxRuns > 0 bounds the runs of a term.
func checkOneTermAtATime(t *testing.T, runs []runRow, maxRuns int) []term {
	t.Helper()
	var terms []term
	for i, r := range runs {
		if i > 0 && r.token < runs[i-1].token {
			t.Errorf("run %d (term %d, %s) committed after run %d of the later term %d", r.id, r.token, r.leader, runs[i-1].id, runs[i-1].token)
		}
		if len(terms) == 0 || terms[len(terms)-1].token != r.token {
			terms = append(terms, term{token: r.token, leader: r.leader, first: r.at})
		}
		tm := &terms[len(terms)-1]
		if i > 0 && runs[i-1].token == r.token && (runs[i-1].holder != r.holder || runs[i-1].leader != r.leader) {
			t.Errorf("runs %d and %d share token %d but not their holder (%s %s, %s %s)", runs[i-1].id, r.id, r.token, runs[i-1].leader, runs[i-1].holder, r.leader, r.holder)
		}
		tm.runs++
		tm.last = r.at
		if maxRuns > 0 && tm.runs > maxRuns {
			t.Errorf("term %d wrote %d runs, more than -max-runs %d", tm.token, tm.runs, maxRuns)
		}
	}
	return terms
}

var observedLine = regexp.MustCompile(`(?m)observer: leader is (\S+) \(term (\d+)\)$`)

// checkObserved checks the observer's lines: at least min leaders, tokens
// increasing, each with the value its term wrote with.
func checkObserved(t *testing.T, who, out string, terms []term, min int) {
	t.Helper()
	byToken := map[distlock.Token]string{}
	for _, tm := range terms {
		byToken[tm.token] = tm.leader
	}
	seen := observedLine.FindAllStringSubmatch(out, -1)
	if len(seen) < min {
		t.Errorf("%s saw %d leaders, want at least %d", who, len(seen), min)
	}
	var last distlock.Token
	for _, m := range seen {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		tok := distlock.Token(n)
		if tok <= last {
			t.Errorf("%s saw term %d after term %d", who, tok, last)
		}
		last = tok
		// A leader elected as the program stopped may not have written.
		if v, ok := byToken[tok]; ok && v != m[1] {
			t.Errorf("%s saw %s lead term %d, which %s wrote with", who, m[1], tok, v)
		}
	}
}

// checkStaleRefused writes through the program's own job with the first
// term's fence, and with the last term's token under another holder: the
// database must refuse both and keep its rows.
func checkStaleRefused(t *testing.T, dsn string, runs []runRow) {
	t.Helper()
	if len(runs) == 0 {
		t.Fatal("no runs")
	}
	db := connect(t, dsn)
	first, last := runs[0], runs[len(runs)-1]
	for _, f := range []distlock.Fence{
		{Token: first.token, Holder: first.holder},
		{Token: last.token, Holder: last.holder + "-other"},
	} {
		id, err := write(t.Context(), db, role, f, "stale")
		if !errors.Is(err, fencing.ErrStaleToken) {
			t.Errorf("write with fence %+v (last term %d): id %d, err %v; want ErrStaleToken", f, last.token, id, err)
		}
	}
	if n := len(readRuns(t, db)); n != len(runs) {
		t.Errorf("%d runs after the stale writes, want %d", n, len(runs))
	}
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer for writers in several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want []string
	}{
		{"help", []string{"-h"}, nil, 0, []string{"-dsn", "$DATABASE_URL", "$DISTLOCK_URL, else mem://", "-observe"}},
		{"bad period", []string{"-every", "1ms"}, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/x"}, 2, []string{"-every"}},
		{"bad TTL", []string{"-ttl", "0s"}, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/x"}, 2, []string{"-ttl"}},
		{"bad role", []string{"-role", ""}, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/x"}, 2, []string{"-role"}},
		{"long value", []string{"-value", strings.Repeat("v", distlock.MaxValueLen)}, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/x"}, 2, []string{"-value"}},
		{"no instances", []string{"-instances", "0"}, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/x"}, 2, []string{"-instances"}},
		{"unknown flag", []string{"-nope"}, nil, 2, []string{"-nope"}},
		{"extra argument", []string{"-dsn", "postgres://x@127.0.0.1/x", "extra"}, nil, 2, []string{"extra"}},
		{"bad DSN", []string{"-dsn", "postgres://%zz"}, nil, 1, []string{"bad -dsn"}},
		{"bad lock URL", []string{"-observe", "-url", "nosuch://x"}, nil, 1, []string{"nosuch"}},
		// No database named: say how to get one, start nothing.
		{"no DSN", nil, nil, 2, []string{"no PostgreSQL given", "-dsn", "DATABASE_URL", "-observe", "docker run", "README.md"}},
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

// TestRunFor: -for stops the program, which resigns, and exits 0.
func TestRunFor(t *testing.T) {
	dsn := backendtest.Postgres(t)(t)
	var out bytes.Buffer
	began := time.Now()
	code := cli(t.Context(), []string{"-for", "500ms", "-every", "50ms", "-value", "solo"}, env(map[string]string{"DATABASE_URL": dsn}), &out, &out)
	if code != 0 || time.Since(began) > 30*time.Second {
		t.Fatalf("exit code %d after %v:\n%s", code, time.Since(began), out.String())
	}
	// A term is named by its token (mem:// tokens start from the clock).
	for _, want := range []string{`backend mem:// \(memory\)`, "note: memory is in-process", `solo: elected, term (\d+)`,
		`observer: leader is solo \(term \d+\)`, `solo: resigned term \d+ \(shutting down\)`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestJobStopsWhenTermEnds: the job stops the moment the term's Done
// closes, not at its next period, and the instance is told why.
func TestJobStopsWhenTermEnds(t *testing.T) {
	ctx := t.Context()
	store := memory.NewStore()
	l, err := memory.New(memory.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pool, err := openDB(ctx, backendtest.Postgres(t)(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	el, err := election.New(l, role)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := el.Campaign(ctx, "w", distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	// A period far longer than the test: the job waits for its next run
	// when the term ends.
	w := &worker{cfg: &config{role: role, every: time.Hour}, el: el, pool: pool, value: "w", out: &lines{w: &out}}
	returned := make(chan bool, 1)
	go func() { returned <- w.lead(ctx, tm) }()
	waitFor(t, 30*time.Second, "first run", func() bool {
		return strings.Contains(out.String(), fmt.Sprintf("w: run 1 written in term %d", tm.Token()))
	})

	store.ForceExpire(role) // the server drops the lock; the term's next renewal finds it gone
	select {
	case <-tm.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the term's Done did not close after its lock expired")
	}
	select {
	case stepAside := <-returned:
		if stepAside {
			t.Error("lead asked to stand aside after losing its term")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the job still runs 5s after its term ended:\n%s", out.String())
	}
	if want := fmt.Sprintf("w: term %d ended, job stopped: ", tm.Token()); !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	if !errors.Is(tm.Err(), distlock.ErrLeaseLost) {
		t.Errorf("term.Err() = %v, want ErrLeaseLost", tm.Err())
	}
}
