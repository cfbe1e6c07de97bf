package faults

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

// soakRow accumulates one backend × workload × mode over a soak's rounds.
type soakRow struct {
	backend, family string
	workload        string
	mode            Mode
	seeds           []uint64
	c               Check
	faults          map[string]int
	violations      map[string]int
	counted         map[string]int
	worstNotice     time.Duration
	worstRecovery   time.Duration
	examples        []string
	election        ElectionStats
	failed          bool
	tg              *Target
}

func (s *soakRow) add(r RandomRow) {
	s.seeds = append(s.seeds, r.Seed)
	s.c.Writes += r.Check.Writes
	s.c.Accepted += r.Check.Accepted
	s.c.Rejected += r.Check.Rejected
	s.c.Uncertain += r.Check.Uncertain
	s.c.LegitRejected += r.Check.LegitRejected
	s.c.Acquires += r.Check.Acquires
	s.c.AcquireErrs += r.Check.AcquireErrs
	s.c.LostUpdates += r.Check.LostUpdates
	s.c.StaleAccepts += r.Check.StaleAccepts
	if r.Check.Linearizable != "ok" || s.c.Linearizable == "" {
		if s.c.Linearizable != "illegal" {
			s.c.Linearizable = r.Check.Linearizable
		}
	}
	for k, n := range r.Faults {
		s.faults[string(k)] += n
	}
	for k, n := range r.Counted {
		s.counted[k] += n
	}
	for _, v := range r.Violations {
		s.violations[v.Rule]++
		if len(s.examples) < 5 {
			s.examples = append(s.examples, fmt.Sprintf("seed %d: %v", r.Seed, v))
		}
	}
	if e := r.Election; e != nil {
		s.election.Terms += e.Terms
		s.election.Resigned += e.Resigned
		s.election.Lost += e.Lost
		s.election.Abandoned += e.Abandoned
		s.election.Observed += e.Observed
		s.election.Unmatched += e.Unmatched
	}
	s.worstNotice = max(s.worstNotice, r.WorstLossNotice)
	s.worstRecovery = max(s.worstRecovery, r.WorstRecovery)
}

// TestSoak runs the randomized schedule on every backend for SOAK_DURATION
// (make soak: 30m by default; not in CI), in rounds of about a minute,
// alternating within and beyond the declared tolerance, each round with its
// own seed (SOAK_SEED + round, printed); every other pair of rounds runs
// the election workload instead of the lock workload (SOAK_WORKLOAD=lock or
// election runs only that one; SOAK_BACKEND=name one deployment only: with
// SOAK_SEED and SOAK_DURATION=1m, a within round's replay). It writes the
// rows to SOAK_JSON (default
// reports/soak.json, matrixfile format, matrix "soak"; the election rows
// have workload "election") and logs the table.
func TestSoak(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness needs Linux")
	}
	total, err := time.ParseDuration(os.Getenv("SOAK_DURATION"))
	if err != nil || total <= 0 {
		t.Skip("set SOAK_DURATION (make soak)")
	}
	base := envUint("SOAK_SEED")
	if base == 0 {
		base = uint64(time.Now().Unix())
	}
	round := time.Minute
	if r, err := time.ParseDuration(os.Getenv("SOAK_ROUND")); err == nil && r > 0 {
		round = r
	}
	workloads := []string{"", WorkloadElection}
	switch w := os.Getenv("SOAK_WORKLOAD"); w {
	case "":
	case "lock":
		workloads = []string{""}
	case WorkloadElection:
		workloads = []string{WorkloadElection}
	default:
		t.Fatalf("SOAK_WORKLOAD=%q: want lock or election", w)
	}
	// SOAK_KINDS (comma-separated) narrows the draws to those kinds, and
	// admits the opt-in ones (hang-server).
	var kinds []Kind
	for _, k := range strings.Split(os.Getenv("SOAK_KINDS"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			kinds = append(kinds, Kind(k))
		}
	}
	t.Logf("soak: %v per backend, rounds of %v, seeds from %d, kinds %v", total, round, base, kinds)
	began := time.Now()
	sh := Setup(t)
	var (
		mu   sync.Mutex
		rows = map[string]*soakRow{}
	)
	t.Run("backends", func(t *testing.T) {
		for _, spec := range randomBackends() {
			if !Available(spec) || (os.Getenv("SOAK_BACKEND") != "" && spec.Name != os.Getenv("SOAK_BACKEND")) {
				continue
			}
			t.Run(spec.Name, func(t *testing.T) {
				t.Parallel()
				tg := spec.Start(t)
				end := time.Now().Add(total)
				for i := 0; time.Now().Before(end); i++ {
					mode := Within
					if i%2 == 1 {
						mode = Beyond
					}
					workload := workloads[(i/2)%len(workloads)]
					seed := base + uint64(i)
					span := min(round-6*time.Second, time.Until(end))
					if span < 5*time.Second {
						break
					}
					name := fmt.Sprintf("%s-%d", mode, seed)
					if workload != "" {
						name = workload + "-" + name
					}
					var row RandomRow
					ok := t.Run(name, func(t *testing.T) {
						row = RunRandom(t, sh, tg, RandomConfig{Mode: mode, Seed: seed, Think: 6 * time.Millisecond,
							Workload: workload, Term: 2 * time.Second,
							Gen:    GenOptions{Warmup: time.Second, Span: span, MeanGap: time.Second, Kinds: kinds},
							Settle: 5 * time.Second})
						t.Log(row)
						judgeRow(t, row)
					})
					mu.Lock()
					k := spec.Name + "/" + workload + "/" + string(mode)
					if rows[k] == nil {
						rows[k] = &soakRow{backend: spec.Name, family: tg.Guarantees.Backend, workload: workload, mode: mode, tg: tg,
							faults: map[string]int{}, violations: map[string]int{}, counted: map[string]int{}}
					}
					rows[k].add(row)
					rows[k].failed = rows[k].failed || !ok
					mu.Unlock()
				}
			})
		}
	})
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "soak %v per backend, seeds from %d, %d cores\n\n", total, base, runtime.NumCPU())
	fmt.Fprintln(&b, "| backend | workload | mode | rounds | guarded ops | accepted | rejected | faults by kind | violations (claimed) | all rule breaks | worst loss-notice delay | worst recovery |")
	fmt.Fprintln(&b, "|---|---|---|---:|---:|---:|---:|---|---|---|---:|---:|")
	ops := 0
	kv := func(m map[string]int) string {
		var s []string
		for k, n := range m {
			s = append(s, fmt.Sprintf("%s %d", k, n))
		}
		slices.Sort(s)
		if len(s) == 0 {
			return "0"
		}
		return strings.Join(s, ", ")
	}
	f := &matrixfile.File{Header: matrixfile.Header{Version: matrixfile.Version, Matrix: "soak",
		Date: began.UTC().Truncate(time.Second), Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Commit: gitHead(),
		Workers: cellWorkers, AfterFault: "5s", TTLMs: float64(TTL / time.Millisecond)}}
	f.Host, _ = os.Hostname()
	for _, k := range keys {
		r := rows[k]
		ops += r.c.Writes
		workload, note := r.workload, r.examples
		if workload == "" {
			workload = "lock"
		} else {
			note = append([]string{r.election.String()}, note...)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %s | %s | %s | %v | %v |\n", r.backend, workload, r.mode, len(r.seeds), r.c.Writes,
			r.c.Accepted, r.c.Rejected, kv(r.faults), kv(r.violations), kv(r.counted),
			r.worstNotice.Round(time.Millisecond), r.worstRecovery.Round(time.Millisecond))
		f.Rows = append(f.Rows, matrixfile.Row{Backend: r.backend, Family: r.family, Fault: "random", Mode: string(r.mode), Workload: r.workload,
			Ops: r.c.Writes, Accepted: r.c.Accepted, Rejected: r.c.Rejected, Uncertain: r.c.Uncertain, LegitRejected: r.c.LegitRejected,
			Acquires: r.c.Acquires, AcquireErrors: r.c.AcquireErrs, LostUpdates: r.c.LostUpdates, StaleAccepted: r.c.StaleAccepts,
			Linearizable: r.c.Linearizable, BoundMs: float64(r.tg.TTL+r.tg.Renew) / float64(time.Millisecond),
			FailuresTolerated: r.tg.Guarantees.FailuresTolerated, RestartLosesLocks: r.tg.Guarantees.RestartLosesLocks,
			ClockDependent: r.tg.Guarantees.ClockDependent, Note: strings.Join(note, "; "), Failed: r.failed,
			Seeds: r.seeds, FaultsByKind: r.faults, Violations: r.violations, Counted: r.counted,
			WorstLossNoticeMs: matrixfile.Ms(r.worstNotice), WorstRecoveryMs: matrixfile.Ms(r.worstRecovery),
			LongestWaitMs: matrixfile.Ms(r.worstRecovery)})
	}
	fmt.Fprintf(&b, "\nguarded operations in total: %d\n", ops)
	t.Log("\n" + b.String())
	el := time.Since(began).Round(time.Second)
	f.Duration, f.DurationS, f.Passed = el.String(), el.Seconds(), !t.Failed()
	path := os.Getenv("SOAK_JSON")
	if path == "" {
		path = "reports/soak.json"
	}
	if err := matrixfile.Write(fromRepoRoot(path), f); err != nil {
		t.Errorf("soak json: %v", err)
	}
}
