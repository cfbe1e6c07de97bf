package faults

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	long    = flag.Bool("faults.long", os.Getenv("FAULTS_LONG") != "", "run the long matrix (≥ 10,000 guarded operations) and print its table")
	jsonOut = flag.String("faults.json", os.Getenv("FAULTS_JSON"), "write the matrix's rows as JSON to this file (a relative path is taken from the repository root; or FAULTS_JSON)")
)

// pause is how long a paused holder or server stays stopped: longer than
// every backend's real TTL (Redis 1s, etcd 2s, ZooKeeper session 1.5s).
const pause = 3 * time.Second

// matrix lists, per backend, the faults that run against it.
func matrix() []struct {
	spec   BackendSpec
	faults []Fault
} {
	by := map[string]BackendSpec{}
	for _, b := range Backends() {
		by[b.Name] = b
	}
	holder, server, restart := PauseHolder(pause), PauseServer(pause), KillRestartServer(500*time.Millisecond)
	hole := Blackhole(pause)
	// A slow link shows nothing the other faults do not; it runs in the
	// long matrix only, to keep CI short.
	slow := Fault{Name: "delay", Applies: func(*Target) bool { return false }}
	if *long {
		slow = Delay(200*time.Millisecond, pause)
	}
	return []struct {
		spec   BackendSpec
		faults []Fault
	}{
		{by["redis"], []Fault{holder, server, restart, hole, slow}},
		{by["redis-aof"], []Fault{restart}},
		{by["redlock"], []Fault{holder, hole, RedlockClockJump()}},
		{by["redlock5"], []Fault{LoseMinority()}},
		{by["etcd"], []Fault{holder, server, restart, hole, slow}},
		{by["etcd3"], []Fault{LoseMinority()}},
		{by["zookeeper"], []Fault{holder, server, restart, hole, slow}},
		{by["zookeeper3"], []Fault{LoseMinority()}},
		{by["postgres"], []Fault{holder, restart, hole}},
	}
}

// TestMatrix runs every backend × fault × mode and checks the rows:
//   - guarded: no stale write accepted, no lost update, a linearizable
//     counter history — unless the deployment declares that the fault can
//     repeat tokens (Redis without fsync, killed and restarted);
//   - unguarded under a paused holder: overlaps or lost updates (the
//     negative control: none means the harness cannot see a violation);
//   - under a fault the backend declares it tolerates: no overlap
//     (unguarded), and some lease granted after the fault;
//   - a paused holder's Lease.Done closes within TTL + one renewal interval
//     of its resume;
//   - no legitimate write rejected: no guarded write is refused as stale
//     while its lease still stood (not ended, deadline not passed), under
//     any fault — a refusal is fine only once the writer's lease is over,
//     or for the lease a Supersedes fault (the clock jump) overtakes.
func TestMatrix(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness needs Linux (CLOCK_MONOTONIC shared across processes, Pdeathsig)")
	}
	began := time.Now()
	sh := Setup(t)
	warm, after, think := 700*time.Millisecond, 1500*time.Millisecond, 30*time.Millisecond
	if *long {
		warm, after, think = time.Second, 15*time.Second, 6*time.Millisecond
	}
	var (
		mu    sync.Mutex
		rows  []Row
		cells []cell   // rows with what the JSON file adds
		skip  []string // backends not run, and why
	)
	// Backends run in parallel (go test's -parallel, GOMAXPROCS by
	// default): the cells mostly wait, and each backend has its own servers.
	t.Run("backends", func(t *testing.T) {
		for _, m := range matrix() {
			if !Available(m.spec) {
				t.Logf("%s: scheme %s:// not registered, skipped", m.spec.Name, m.spec.Scheme)
				skip = append(skip, m.spec.Name+": scheme "+m.spec.Scheme+":// not registered")
				continue
			}
			t.Run(m.spec.Name, func(t *testing.T) {
				t.Parallel()
				defer func() { // t.Skip ends the goroutine; deferred calls still run
					if t.Skipped() {
						mu.Lock()
						skip = append(skip, m.spec.Name+": skipped (server not installed?)")
						mu.Unlock()
					}
				}()
				runBackend(t, sh, m.spec, m.faults, warm, after, think, func(c cell) {
					mu.Lock()
					rows = append(rows, c.Row)
					cells = append(cells, c)
					mu.Unlock()
				})
			})
		}
	})
	slices.SortStableFunc(rows, func(a, b Row) int { return strings.Compare(a.Backend, b.Backend) })
	if *long || testing.Verbose() {
		t.Log("\n" + Table(rows))
	}
	if *jsonOut != "" {
		writeMatrixJSON(t, *jsonOut, began, after, cells, skip)
	}
}

// runBackend runs every fault × mode on one backend, on one set of servers
// that heal restores between cells.
func runBackend(t *testing.T, sh *Shared, spec BackendSpec, faults []Fault, warm, after, think time.Duration, add func(cell)) {
	tg := spec.Start(t)
	for _, f := range faults {
		if !f.Applies(tg) {
			continue
		}
		for _, guarded := range []bool{false, true} {
			sc := Scenario{Backend: spec, Fault: f, Guarded: guarded, Workers: cellWorkers, Seed: 1,
				Warmup: warm, After: after, Think: think}
			t.Run(f.Name+"/"+sc.Mode(), func(t *testing.T) {
				row := Run(t, sh, sc, tg)
				heal(t, tg)
				t.Log(row)
				judge(t, sc, tg, row)
				add(cell{Row: row, Guarantees: tg.Guarantees, Failed: t.Failed()})
			})
		}
	}
}

// judge applies the assertions of TestMatrix to one row.
func judge(t *testing.T, sc Scenario, tg *Target, row Row) {
	t.Helper()
	g := tg.Guarantees
	if row.Broken != "" {
		t.Errorf("%s: %s", sc.Fault.Name, row.Broken)
	}
	if row.Acquires == 0 || row.Writes == 0 {
		t.Errorf("no work done: %v", row)
	}
	// No excuse for a restart without persistence: it may lose locks, but
	// tokens keep increasing, so the fence must still refuse every stale write.
	if sc.Guarded {
		if row.StaleAccepts != 0 || row.LostUpdates != 0 || row.Linearizable == "illegal" {
			t.Errorf("guarded run violated: stale accepted %d, lost updates %d, linearizable %s",
				row.StaleAccepts, row.LostUpdates, row.Linearizable)
		}
	}
	if row.LegitRejected != 0 {
		t.Errorf("legitimate write rejected: %d guarded write(s) refused as stale while the writer's lease still stood (not ended, deadline not passed)",
			row.LegitRejected)
	}
	if !sc.Guarded && sc.Fault.HolderPause && row.Overlaps == 0 && row.LostUpdates == 0 {
		t.Errorf("negative control: the unguarded run under a paused holder shows no overlap and no lost update; the harness is broken")
	}
	if sc.Fault.Tolerated(g, tg) {
		if !sc.Guarded && row.Overlaps != 0 {
			t.Errorf("%s declares it tolerates %s, but %d overlapping leases were seen: %s", tg.Backend, sc.Fault.Name, row.Overlaps, row.OverlapDetail)
		}
		if row.Usable < 0 {
			t.Errorf("%s declares it tolerates %s, but no lease was granted after it", tg.Backend, sc.Fault.Name)
		}
	}
	if sc.Fault.HolderPause {
		if row.DoneAfterResume < 0 {
			t.Errorf("the paused holder's Lease.Done never closed after its resume")
		} else if row.DoneAfterResume > row.Bound {
			t.Errorf("the paused holder's Lease.Done closed %v after its resume, want within TTL + renew interval = %v",
				row.DoneAfterResume, row.Bound)
		}
	}
}

// Table formats rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	ms := func(d time.Duration) string {
		if d < 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	fmt.Fprintln(&b, "| backend | fault | mode | ops | accepted | rejected | legit rejected | overlaps | lost updates | stale accepted | linearizable | Done after resume | longest wait for a grant |")
	fmt.Fprintln(&b, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
	var guardedOps int
	for _, r := range rows {
		if r.Mode == "guarded" {
			guardedOps += r.Writes
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n",
			r.Backend, r.Fault, r.Mode, r.Writes, r.Accepted, r.Rejected, r.LegitRejected, r.Overlaps, r.LostUpdates,
			r.StaleAccepts, r.Linearizable, ms(r.DoneAfterResume), ms(r.Usable))
	}
	fmt.Fprintf(&b, "\nguarded operations in total: %d\n", guardedOps)
	return b.String()
}
