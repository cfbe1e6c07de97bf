package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/examples/internal/backendtest"
)

// proc is one instance of the program in a process of its own.
type proc struct {
	value string
	cmd   *exec.Cmd
	out   *syncBuffer
	exit  chan error
}

// startProc runs the program (this test binary, see TestMain) as a user
// would in a terminal of its own.
func startProc(t *testing.T, url, dsn, value string, ttl time.Duration) *proc {
	t.Helper()
	p := &proc{value: value, out: &syncBuffer{}, exit: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], "-url", url, "-role", role, "-value", value, "-every", "100ms", "-ttl", ttl.String())
	p.cmd.Env = append(os.Environ(), childEnv+"=1", "DATABASE_URL="+dsn)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exit <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // a stopped process too
		<-p.exit
	})
	return p
}

func (p *proc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatalf("%s: %v: %v", p.value, s, err)
	}
}

// wait returns the process's exit error, or fails after d.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exit:
		p.exit <- err
		return err
	case <-time.After(d):
		t.Fatalf("%s still running after %v", p.value, d)
		return nil
	}
}

// TestLeaderProcesses runs three instances as separate processes on each
// server backend (mem:// is not shared between processes) and does to the
// leader what an operator or a failure would: kill -9 (another instance
// takes over when the lock expires), SIGSTOP past the TTL then SIGCONT (the
// paused leader is replaced; when it wakes its term has ended and it
// campaigns again, and nothing it writes is accepted), and SIGINT (it
// resigns: the hand-over is immediate).
func TestLeaderProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and pauses processes for several TTLs")
	}
	newDB := backendtest.Postgres(t)
	backendtest.Each(t, []string{"redis", "redlock", "etcd", "zk"}, func(t *testing.T, url string) {
		const ttl = 3 * time.Second
		if strings.HasPrefix(url, "zk://") {
			url += fmt.Sprintf("?session_timeout=%v", ttl) // a ZooKeeper lock lasts as long as the session
		}
		dsn := newDB(t)
		procs := map[string]*proc{}
		for _, v := range []string{"p0", "p1", "p2"} {
			procs[v] = startProc(t, url, dsn, v, ttl)
		}
		defer func() {
			if t.Failed() || testing.Verbose() {
				for _, v := range []string{"p0", "p1", "p2"} {
					t.Logf("%s:\n%s", v, procs[v].out.String())
				}
			}
		}()
		db := connect(t, dsn)
		inspector, err := distlock.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer inspector.Close()

		first := waitTerm(t, db, 0, 60*time.Second)
		p := procs[first.leader]
		p.signal(t, syscall.SIGKILL)
		second := waitTerm(t, db, first.token, 30*time.Second)
		if second.leader == p.value {
			t.Fatalf("the killed %s wrote term %d", p.value, second.token)
		}
		t.Logf("kill -9 %s (term %d): %s leads term %d", p.value, first.token, second.leader, second.token)

		q := procs[second.leader]
		q.signal(t, syscall.SIGSTOP)
		third := waitTerm(t, db, second.token, 30*time.Second)
		q.signal(t, syscall.SIGCONT)
		if third.leader == q.value {
			t.Fatalf("the paused %s wrote term %d", q.value, third.token)
		}
		t.Logf("SIGSTOP %s (term %d): %s leads term %d", q.value, second.token, third.leader, third.token)
		// Woken, q finds its term over (or the fence tells it) and campaigns again.
		ended := regexp.MustCompile(fmt.Sprintf(`%s: (term %d (ended|had ended)|write REFUSED, term %d is stale)[^\n]*\n(.*\n)*.*%s: campaigning`,
			q.value, second.token, second.token, q.value))
		waitFor(t, 30*time.Second, q.value+"'s term ending after SIGCONT", func() bool { return ended.MatchString(q.out.String()) })

		// Before interrupting the leader, wait for q to be queued where the
		// backend counts waiters (etcd, ZooKeeper): after its pause, q's
		// ZooKeeper session has expired and its client makes a new one
		// first, which is not part of a hand-over.
		queued := time.Now()
		waitFor(t, 30*time.Second, q.value+" queued as a candidate", func() bool {
			h, err := inspector.Inspect(t.Context(), role)
			return err == nil && h.Held && h.Token == third.token && h.Waiters != 0 // -1: no queue to read
		})
		t.Logf("%s queued %v after its term ended", q.value, time.Since(queued).Round(time.Millisecond))
		r := procs[third.leader]
		interrupted := time.Now()
		r.signal(t, syscall.SIGINT)
		fourth := waitTerm(t, db, third.token, 30*time.Second)
		if fourth.leader != q.value {
			t.Errorf("term %d led by %s, want %s, the only instance left", fourth.token, fourth.leader, q.value)
		}
		// Killed, r would hold the role for what its TTL had left: at least
		// 2/3 of it (a term renews itself every third of its TTL).
		if d := time.Since(interrupted); d >= ttl/2 {
			t.Errorf("after SIGINT to %s, %s took %v to write twice: that is the TTL, not a resignation", r.value, fourth.leader, d)
		}
		if err := r.wait(t, 30*time.Second); err != nil {
			t.Errorf("%s after SIGINT: %v, want exit status 0", r.value, err)
		}
		if want := fmt.Sprintf("%s: resigned term %d (shutting down)", r.value, third.token); !strings.Contains(r.out.String(), want) {
			t.Errorf("%s's output lacks %q", r.value, want)
		}
		q.signal(t, syscall.SIGTERM)
		if err := q.wait(t, 30*time.Second); err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit status 0", q.value, err)
		}

		runs := readRuns(t, db)
		terms := checkOneTermAtATime(t, runs, 0)
		if len(terms) < 4 {
			t.Errorf("%d terms wrote, want 4: %+v", len(terms), terms)
		}
		checkStaleRefused(t, dsn, runs)
	})
}

// waitTerm waits for the second run of a term later than after (a leader
// at work, not just elected) and returns the term.
func waitTerm(t *testing.T, db *pgxpool.Pool, after distlock.Token, d time.Duration) term {
	t.Helper()
	var tm term
	waitFor(t, d, fmt.Sprintf("two runs of a term after %d", after), func() bool {
		err := db.QueryRow(t.Context(), `SELECT token, min(leader) FROM leader_demo_runs WHERE role = $1 AND token > $2
			GROUP BY token HAVING count(*) >= 2 ORDER BY token LIMIT 1`, role, int64(after)).Scan(&tm.token, &tm.leader)
		return err == nil
	})
	return tm
}
