package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/testserver"
)

func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// Target is a running backend: its servers and the URL workers open.
type Target struct {
	Backend string
	Servers []*testserver.Server
	Cluster *testserver.Cluster // etcd and ZooKeeper clusters
	// URL builds the backend URL from the servers' client addresses (the
	// servers' own, or proxies in front of them).
	URL func(addrs []string) string
	// TTL is the lease TTL workers use; Renew the renewal interval it implies.
	TTL, Renew time.Duration
	// Guarantees as the backend declares them for this deployment.
	Guarantees distlock.Guarantees

	proxyable bool
	// resends marks the Redis deployments: go-redis resends a command after
	// a read timeout, so a request can land late and twice (late-request).
	resends bool
	// Redlock marks Redlock deployments; repairs those whose refresh takes
	// a lock back on a node that lost it (a restart is then tolerated, one
	// node at a time).
	Redlock, repairs bool
	// Election is the election or session timeout the recovery bound
	// allows for; Linger how long a server may keep a lock past the end
	// of its holder's local validity (etcd's lease is ceil(TTL)+1 s).
	Election, Linger time.Duration
}

// addrs returns the servers' client addresses.
func (tg *Target) addrs() []string {
	a := make([]string, len(tg.Servers))
	for i, s := range tg.Servers {
		a[i] = s.Addr()
	}
	return a
}

// primary is the server a single-node fault hits: the leader of a cluster
// if one answers, else the first.
func (tg *Target) primary() *testserver.Server {
	if tg.Cluster != nil {
		if l, err := tg.Cluster.Leader(); err == nil {
			return tg.Servers[l]
		}
	}
	return tg.Servers[0]
}

// BackendSpec starts one backend for a scenario.
type BackendSpec struct {
	Name string
	// Scheme must be registered with distlock for the backend to run.
	Scheme string
	Start  func(t testing.TB) *Target
}

// Scenario is backend × fault × mode.
type Scenario struct {
	Backend BackendSpec
	Fault   Fault
	Guarded bool
	Workers int
	Seed    uint64
	// Warmup runs before the fault; After runs after it, before the workers
	// are told to stop.
	Warmup, After time.Duration
	// Think bounds each of the worker's two random sleeps.
	Think time.Duration
}

// Mode is "guarded" or "unguarded".
func (sc Scenario) Mode() string {
	if sc.Guarded {
		return "guarded"
	}
	return "unguarded"
}

// Row is a scenario's result.
type Row struct {
	Backend, Fault, Mode string
	Check
	// DoneAfterResume is how long after SIGCONT the paused holder's
	// Lease.Done closed (holder pauses) — or, for a link fault on the
	// holder, how long after the fault began — or -1 if it was not seen.
	DoneAfterResume time.Duration
	// Usable is the longest time without a new grant from the fault's start
	// on (the time until the lock was usable again), or -1 if there was
	// no grant after the fault began.
	Usable time.Duration
	// Bound is TTL + one renewal interval, the promise for DoneAfterResume.
	Bound time.Duration
	Note  string
	// Broken is a violation the fault itself observed; see Injected.
	Broken string
}

// Worker is one running worker process.
type Worker struct {
	ID          int
	cmd         *exec.Cmd
	pid         int
	log, status string
	stderr      string
	done        chan struct{}
	waitErr     error
}

// Env is a running scenario, handed to a fault.
type Env struct {
	Target  *Target
	Key     string // the lock key, also the counter row and fence resource
	Guarded bool
	Pool    *pgxpool.Pool

	mu      sync.Mutex
	extra   []Event // the history of a client the fault itself runs
	Workers []*Worker
	links   *links // nil unless the fault is a Link fault
	// WorkerArgs are extra worker flags (-idle, -wait, -workload).
	WorkerArgs []string
	// Observer adds one worker (the last, connected to the servers
	// directly, never a fault's target) that follows the election's
	// leaders (-workload observe).
	Observer bool
}

// record adds an event to the history of the fault's own client.
func (env *Env) record(e Event) {
	env.mu.Lock()
	defer env.mu.Unlock()
	env.extra = append(env.extra, e)
}

// waitHolder polls the workers' status files until one holds the lock and
// returns it with its token.
func (env *Env) waitHolder(ctx context.Context) (*Worker, int64, error) {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, w := range env.Workers {
			if tok := readStatus(w.status); tok != 0 {
				return w, tok, nil
			}
		}
		time.Sleep(time.Millisecond)
	}
	return nil, 0, errors.New("no worker took the lock within 15s")
}

// Shared is the state scenarios share: PostgreSQL and the worker binary.
type Shared struct {
	Worker string
	PG     *testserver.Server
	Pool   *pgxpool.Pool

	mutantOnce sync.Once
	mutant     string // the worker built with -tags distlock_mutations
}

// Setup starts PostgreSQL, creates the counter and fence tables, and builds
// the worker.
func Setup(t testing.TB) *Shared {
	t.Helper()
	dir := t.TempDir()
	var bin string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); bin = buildWorker(dir) }()
	pg := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	wg.Wait()
	if strings.HasPrefix(bin, "error: ") {
		t.Fatal(bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := fencing.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS faults_counter (key text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &Shared{Worker: bin, PG: pg, Pool: pool}
}

func buildWorker(dir string, tags ...string) string {
	bin := filepath.Join(dir, "faults-worker")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		bin += "-" + strings.Join(tags, "-")
		args = []string{"build", "-o", bin, "-tags", strings.Join(tags, ",")}
	}
	cmd := exec.Command("go", append(args, "github.com/distlock/distlock/cmd/internal/faults/worker")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("error: build worker: %v\n%s", err, out)
	}
	return bin
}

// startWorkers starts n workers of binary bin on env (through env.links
// when set), with extra environment variables, plus the observer when
// env.Observer is set, and returns the function that stops them all
// (SIGCONT, SIGTERM, then SIGKILL after grace).
func startWorkers(t testing.TB, sh *Shared, env *Env, dir string, n int, bin string, environ []string, think time.Duration, seed uint64) func(grace time.Duration) {
	t.Helper()
	tg, key := env.Target, env.Key
	mode := "unguarded"
	if env.Guarded {
		mode = "guarded"
	}
	if env.Observer {
		n++
	}
	for i := range n {
		observer := env.Observer && i == n-1
		url := tg.URL(tg.addrs())
		if env.links != nil && !observer {
			addrs, err := env.links.add(i, tg.addrs())
			if err != nil {
				t.Fatal(err)
			}
			url = tg.URL(addrs)
		}
		w := &Worker{ID: i,
			log:    filepath.Join(dir, fmt.Sprintf("w%d.jsonl", i)),
			status: filepath.Join(dir, fmt.Sprintf("w%d.status", i)),
			stderr: filepath.Join(dir, fmt.Sprintf("w%d.stderr", i)),
			done:   make(chan struct{}),
		}
		errf, err := os.Create(w.stderr)
		if err != nil {
			t.Fatal(err)
		}
		w.cmd = exec.Command(bin,
			"-url", url, "-key", key, "-dsn", sh.PG.DSN(), "-mode", mode,
			"-log", w.log, "-status", w.status, "-id", strconv.Itoa(i),
			"-ttl", tg.TTL.String(), "-think", think.String(),
			"-seed", strconv.FormatUint(seed, 10), "-duration", "60m")
		w.cmd.Args = append(w.cmd.Args, env.WorkerArgs...)
		if observer {
			w.cmd.Args = append(w.cmd.Args, "-workload", "observe") // the last -workload counts
		}
		if environ != nil {
			w.cmd.Env = append(os.Environ(), environ...)
		}
		w.cmd.Stdout, w.cmd.Stderr = errf, errf
		// Die with the test binary even if it is killed.
		w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := w.cmd.Start(); err != nil {
			errf.Close()
			t.Fatal(err)
		}
		errf.Close()
		w.pid = w.cmd.Process.Pid
		go func() { w.waitErr = w.cmd.Wait(); close(w.done) }()
		env.Workers = append(env.Workers, w)
	}
	stopAll := func(grace time.Duration) {
		for _, w := range env.Workers {
			select {
			case <-w.done: // reaped: its pid may belong to someone else now
			default:
				_ = syscall.Kill(w.pid, syscall.SIGCONT)
				_ = syscall.Kill(w.pid, syscall.SIGTERM)
			}
		}
		for _, w := range env.Workers {
			select {
			case <-w.done:
			case <-time.After(grace):
				_ = w.cmd.Process.Kill()
				<-w.done
			}
		}
	}
	t.Cleanup(func() { stopAll(time.Second) })
	return stopAll
}

var keySeq atomic.Int64

// Run runs one scenario to the end and returns its row. Infrastructure
// failures (a worker that will not start, a fault that cannot be injected)
// fail t; what the checkers find is for the caller to judge.
func Run(t testing.TB, sh *Shared, sc Scenario, tg *Target) Row {
	t.Helper()
	ctx := context.Background()
	key := fmt.Sprintf("faults/%s/%s/%s/%d", tg.Backend, sc.Fault.Name, sc.Mode(), keySeq.Add(1))
	if _, err := sh.Pool.Exec(ctx, `INSERT INTO faults_counter (key, n) VALUES ($1, 0)`, key); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if d := os.Getenv("FAULTS_KEEP"); d != "" { // keep the logs for a post-mortem
		var err error
		if dir, err = os.MkdirTemp(d, "cell-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("logs in %s", dir)
	}
	env := &Env{Target: tg, Key: key, Guarded: sc.Guarded, Pool: sh.Pool}
	if sc.Fault.Link {
		env.links = newLinks()
		t.Cleanup(env.links.close)
	}
	stopAll := startWorkers(t, sh, env, dir, max(sc.Workers, 2), sh.Worker, nil, sc.Think, sc.Seed)

	sleep(ctx, sc.Warmup)
	in, ferr := sc.Fault.Inject(ctx, env)
	if ferr != nil {
		stopAll(5 * time.Second)
		t.Fatalf("%s: inject: %v", sc.Fault.Name, ferr)
	}
	sleep(ctx, max(sc.After, sc.Fault.Settle))
	stopAll(30 * time.Second)
	lastT := mono()

	var final int64
	if err := sh.Pool.QueryRow(ctx, `SELECT n FROM faults_counter WHERE key = $1`, key).Scan(&final); err != nil {
		t.Fatal(err)
	}
	evs := make([][]Event, len(env.Workers), len(env.Workers)+1)
	if len(env.extra) > 0 {
		evs = append(evs, env.extra)
	}
	readWorkerLogs(t, env, evs)
	row := Row{Backend: tg.Backend, Fault: sc.Fault.Name, Mode: sc.Mode(),
		Check: check(evs, final, lastT), DoneAfterResume: -1, Usable: -1,
		Bound: tg.TTL + tg.Renew, Note: in.Note, Broken: in.Broken}
	// Done: the targeted lease's "lost" event, after the resume of a paused
	// holder (it cannot run before), after the start of a link fault.
	if in.Worker >= 0 {
		ref := in.Start
		if sc.Fault.HolderPause {
			ref = in.End
		}
		for _, e := range evs[in.Worker] {
			if e.Ev == "lost" && e.Token == in.Token && e.T >= ref {
				row.DoneAfterResume = time.Duration(e.T - ref)
				break
			}
		}
	}
	// The superseded holder's lease still stands by its own clock, but a
	// larger token has legitimately been granted past it: refusing it is
	// the fence's job. The fault is beyond the claim, so the hand-overs
	// after it may supersede a lease again (the resumed holder's repairs
	// and the next grants overlap): any lease refused after a larger
	// token was granted while it stood is excused; a refusal with no such
	// grant still counts.
	if sc.Fault.Supersedes {
		if n, targeted := supersededRefusals(evs, in.Token); n > 0 {
			row.LegitRejected -= n
			row.Note += fmt.Sprintf("; %d refusal(s) of superseded holders (%d of the targeted token %d) while their leases stood, as designed",
				n, targeted, in.Token)
		}
	}
	// Usable: the longest time without a new grant (to anyone) from the
	// fault's start on — how long the lock was unusable.
	var grants []int64
	for _, we := range evs {
		for _, e := range we {
			if e.Ev == "acquire" && e.T > in.Start {
				grants = append(grants, e.T)
			}
		}
	}
	slices.Sort(grants)
	prev := in.Start
	for _, g := range grants {
		row.Usable = max(row.Usable, time.Duration(g-prev))
		prev = g
	}
	return row
}

// String formats a row for logs.
func (r Row) String() string {
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64) + "ms"
	}
	return fmt.Sprintf("%-10s %-20s %-9s ops=%-4d acq=%-4d acq-err=%-2d ok=%-4d rej=%-3d legit-rej=%-3d unk=%-2d overlaps=%-3d lost=%-3d stale-ok=%-3d lin=%-7s done-after-resume=%-6s usable=%-6s %s",
		r.Backend, r.Fault, r.Mode, r.Writes, r.Acquires, r.AcquireErrs, r.Accepted, r.Rejected, r.LegitRejected, r.Uncertain,
		r.Overlaps, r.LostUpdates, r.StaleAccepts, r.Linearizable, ms(r.DoneAfterResume), ms(r.Usable), r.Note)
}

// cellWorkers is the number of worker processes in every cell.
const cellWorkers = 3

// heal restarts every server a fault left down, so the next scenario on the
// target starts healthy.
func heal(t testing.TB, tg *Target) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if tg.Cluster != nil {
		if err := tg.Cluster.Restart(ctx); err != nil {
			t.Fatalf("heal %s: %v", tg.Backend, err)
		}
		return
	}
	for _, s := range tg.Servers {
		if s.PID() == 0 {
			if err := s.Restart(ctx); err != nil {
				t.Fatalf("heal %s: %v", tg.Backend, err)
			}
		}
	}
}

// readWorkerLogs reads each worker's event log into evs[i], and logs how a
// worker exited if not by the harness's kill.
func readWorkerLogs(t testing.TB, env *Env, evs [][]Event) {
	t.Helper()
	for i, w := range env.Workers {
		e, err := readLog(w.log)
		if err != nil {
			t.Fatalf("worker %d log: %v", i, err)
		}
		evs[i] = e
		if w.waitErr != nil && !strings.Contains(w.waitErr.Error(), "killed") {
			b, _ := os.ReadFile(w.stderr)
			t.Logf("worker %d exited: %v\n%s", i, w.waitErr, b)
		}
	}
}

// supersededRefusals counts the writes refused by the fence while their
// lease stood (Valid) after another holder had been granted a larger fence
// (epoch, then token) since that lease's own grant, and how many of them
// had the token targeted.
func supersededRefusals(evs [][]Event, targeted int64) (n, ofTargeted int) {
	var grants []Event
	for _, wevs := range evs {
		for _, e := range wevs {
			if e.Ev == "acquire" {
				grants = append(grants, e)
			}
		}
	}
	for _, wevs := range evs {
		var granted int64 // the grant of the worker's current lease
		for _, e := range wevs {
			switch {
			case e.Ev == "acquire":
				granted = e.T
			case e.Ev == "write" && e.Result == "stale" && e.Valid:
				if slices.ContainsFunc(grants, func(g Event) bool {
					return g.Worker != e.Worker && fenceOf(e).less(fenceOf(g)) && g.T > granted && g.T < e.T
				}) {
					n++
					if e.Token == targeted {
						ofTargeted++
					}
				}
			}
		}
	}
	return n, ofTargeted
}
