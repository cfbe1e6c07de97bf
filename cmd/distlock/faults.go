package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

// defaultFaults is where compare looks for the fault matrix without --faults
// (relative to the working directory: the repository root for `make demo`).
const defaultFaults = "reports/faults.json"

// FaultMatrix is compare's fault-matrix section: the run's header, or why
// there is none. The rows are in each backend's FaultRows; Unmatched holds
// those of backends this report did not measure.
type FaultMatrix struct {
	Source string `json:"source,omitempty"`
	// Missing says that no file was read and how to produce one.
	Missing string `json:"missing,omitempty"`
	*matrixfile.Header
	Unmatched []matrixfile.Row `json:"unmatched_rows,omitempty"`
	// Soak is the randomized-fault soak (make soak), when a file was read.
	Soak *Soak `json:"soak,omitempty"`
}

// Soak is compare's soak section: the run's header and its rows (one per
// deployment × mode, fault "random"), read from reports/soak.json or --soak.
type Soak struct {
	Source string `json:"source"`
	*matrixfile.Header
	Rows []matrixfile.Row `json:"rows"`
}

// sourceRepo is where the fault harness lives: it is a Go test, so only a
// source tree can run it, not an installed distlock.
const sourceRepo = "https://github.com/distlock/distlock"

// missingFaults is the text shown when compare has no fault-matrix file.
func missingFaults() string {
	return "Fault matrix: no rows in this report (no " + defaultFaults + " and no --faults FILE). " +
		"The rows come from the fault harness, a Go test in distlock's source repository; " +
		"the distlock binary cannot run it. To get them, in a clone of " + sourceRepo +
		" run at its root `" + matrixfile.Command(defaultFaults) + "` (or `make faults`; " +
		"~2–3 min; add -faults.long for the long matrix, ~8 min), " +
		"then run compare again from there, or with --faults pointing at that file."
}

// loadFaults reads --faults, or defaultFaults if it exists. It returns a
// nil file (and no error) when there is none to read.
func loadFaults(c *benchConfig) (*matrixfile.File, string, error) {
	path := c.faultsPath
	if path == "" {
		if _, err := os.Stat(defaultFaults); errors.Is(err, fs.ErrNotExist) {
			return nil, "", nil
		}
		path = defaultFaults
	}
	f, err := matrixfile.Read(path)
	if err != nil {
		return nil, "", fmt.Errorf("--faults: %w", err)
	}
	if f.Matrix == "soak" {
		return nil, "", fmt.Errorf("--faults: %s is a soak file (make soak): pass it with --soak", path)
	}
	return f, path, nil
}

// defaultSoak is where compare looks for the soak's rows without --soak.
const defaultSoak = "reports/soak.json"

// loadSoak reads --soak, or defaultSoak if it exists; a nil file (and no
// error) when there is none.
func loadSoak(c *benchConfig) (*matrixfile.File, string, error) {
	path := c.soakPath
	if path == "" {
		if _, err := os.Stat(defaultSoak); errors.Is(err, fs.ErrNotExist) {
			return nil, "", nil
		}
		path = defaultSoak
	}
	f, err := matrixfile.Read(path)
	if err != nil {
		return nil, "", fmt.Errorf("--soak: %w", err)
	}
	if f.Matrix != "soak" {
		return nil, "", fmt.Errorf("--soak: %s is a %s fault matrix, not a soak: pass it with --faults", path, f.Matrix)
	}
	return f, path, nil
}

// attachSoak adds the soak section to rep's fault section; rows are kept
// in the order: this report's backends first, then the rest, each by
// deployment, the lock workload before the election workload, within
// before beyond.
func attachSoak(rep *Report, f *matrixfile.File, source string) {
	if f == nil {
		return
	}
	if rep.FaultMatrix == nil {
		rep.FaultMatrix = &FaultMatrix{Missing: missingFaults()}
	}
	rank := map[string]int{}
	for i, b := range rep.Backends {
		if _, ok := rank[b.Backend]; !ok {
			rank[b.Backend] = i
		}
	}
	rs := slices.Clone(f.Rows)
	slices.SortStableFunc(rs, func(a, b matrixfile.Row) int {
		ra, oka := rank[familyOf(a)]
		rb, okb := rank[familyOf(b)]
		switch {
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		case oka && ra != rb:
			return ra - rb
		case !oka && familyOf(a) != familyOf(b):
			return strings.Compare(familyOf(a), familyOf(b))
		case a.Backend != b.Backend:
			return strings.Compare(a.Backend, b.Backend)
		case a.Workload != b.Workload:
			return strings.Compare(a.Workload, b.Workload) // the lock workload ("") first
		}
		return strings.Compare(modeRank(a.Mode), modeRank(b.Mode))
	})
	rep.FaultMatrix.Soak = &Soak{Source: source, Header: &f.Header, Rows: rs}
}

func modeRank(m string) string {
	if m == "within" {
		return "0"
	}
	return "1" + m
}

// soakGroup is one backend family's soak rows.
type soakGroup struct {
	Family string
	Rows   []matrixfile.Row
}

func soakGroups(s *Soak) []soakGroup {
	var gs []soakGroup
	for _, r := range s.Rows {
		if n := len(gs); n > 0 && gs[n-1].Family == familyOf(r) {
			gs[n-1].Rows = append(gs[n-1].Rows, r)
			continue
		}
		gs = append(gs, soakGroup{Family: familyOf(r), Rows: []matrixfile.Row{r}})
	}
	return gs
}

// soakHead describes the soak run.
func soakHead(rep *Report) string {
	s := rep.FaultMatrix.Soak
	h := s.Header
	verdict := "no claimed rule broken"
	if !h.Passed {
		verdict = "SOME CLAIMED RULES BROKEN (rows marked FAIL)"
	}
	ops := 0
	for _, r := range s.Rows {
		ops += r.Ops
	}
	return fmt.Sprintf("Randomized faults (make soak) of %s, took %s, %d guarded operations in all, %d workers per run; %s.\n%s.",
		h.Date.UTC().Format("2006-01-02 15:04 MST"), h.Duration, ops, h.Workers, verdict, provenance(h, rep, s.Source))
}

// soakLegend explains the soak columns.
const soakLegend = "Seeded schedules of overlapping faults (cmd/internal/faults/README.md), every seed reproducible with -random.seed. " +
	"within: only faults the deployment declares it tolerates, every rule (a)–(e) claimed; " +
	"beyond: past the tolerance, only (b) token order and (c) the guard claimed, the other breaks counted (lost liveness, not a failure).\n" +
	"guarded ops: writes through fencing.WithGuard; violations: breaks of the rules the mode claims, by rule; " +
	"all breaks: every rule's, claimed or not; worst loss notice: the longest a superseded lease's Done stayed open after another holder's grant; " +
	"worst recovery: the longest from a fault's end to the next grant. " +
	"A deployment marked (election) ran the election workload: candidates of package election writing through their term's fence while they lead, " +
	"an observer following the leaders (f-observe: leaders reported in term order, each a real term with its candidate's value)."

var soakCols = []string{"deployment", "mode", "runs", "guarded ops", "accepted", "rejected", "faults", "violations", "all breaks", "worst loss notice", "worst recovery", "test"}

// soakCells formats a soak row under soakCols.
func soakCells(r matrixfile.Row) []string {
	ms := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return strconv.FormatFloat(*v, 'f', 0, 64) + " ms"
	}
	byKey := func(m map[string]int) string {
		if len(m) == 0 {
			return "0"
		}
		keys := slices.Sorted(maps.Keys(m))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, m[k])
		}
		return strings.Join(parts, ", ")
	}
	n := 0
	for _, c := range r.FaultsByKind {
		n += c
	}
	faults := strconv.Itoa(n)
	if n > 0 {
		faults += " (" + byKey(r.FaultsByKind) + ")"
	}
	test := "pass"
	if r.Failed {
		test = "FAIL"
	}
	deployment := r.Backend
	if r.Workload != "" {
		deployment += " (" + r.Workload + ")"
	}
	return []string{deployment, r.Mode, strconv.Itoa(len(r.Seeds)), strconv.Itoa(r.Ops), strconv.Itoa(r.Accepted), strconv.Itoa(r.Rejected),
		faults, byKey(r.Violations), byKey(r.Counted), ms(r.WorstLossNoticeMs), ms(r.WorstRecoveryMs), test}
}

// writeSoakText writes the soak section of the text report.
func writeSoakText(w io.Writer, rep *Report) {
	fm := rep.FaultMatrix
	if fm == nil || fm.Soak == nil {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, soakHead(rep))
	fmt.Fprintln(w, soakLegend)
	for _, g := range soakGroups(fm.Soak) {
		fmt.Fprintf(w, "\n== %s (soak) ==\n", g.Family)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(soakCols, "\t"))
		for _, r := range g.Rows {
			fmt.Fprintln(tw, strings.Join(soakCells(r), "\t"))
		}
		tw.Flush()
	}
}

// familyOf is the compare backend a fault-harness row belongs to: its
// declared Guarantees.Backend, or for a file without it, the deployment's
// name without its variant (redis-aof → redis, etcd3 → etcd, redlock5 →
// redlock, zookeeper3 → zookeeper).
func familyOf(r matrixfile.Row) string {
	if r.Family != "" {
		return r.Family
	}
	name, _, _ := strings.Cut(r.Backend, "-")
	name = strings.TrimRight(name, "0123456789")
	if name == "zk" {
		name = "zookeeper"
	}
	return name
}

// attachFaults puts f's rows beside the backends of rep they belong to.
func attachFaults(rep *Report, f *matrixfile.File, source string) {
	if f == nil {
		rep.FaultMatrix = &FaultMatrix{Missing: missingFaults()}
		return
	}
	fm := &FaultMatrix{Source: source, Header: &f.Header}
	// Deployments of one backend (etcd, etcd3) ran in parallel: keep each
	// one's rows together, in the order they ran.
	rs := slices.Clone(f.Rows)
	slices.SortStableFunc(rs, func(a, b matrixfile.Row) int { return strings.Compare(a.Backend, b.Backend) })
	for _, r := range rs {
		matched := false
		for _, b := range rep.Backends {
			if b.Backend == familyOf(r) {
				b.FaultRows = append(b.FaultRows, r)
				matched = true
			}
		}
		if !matched {
			fm.Unmatched = append(fm.Unmatched, r)
		}
	}
	rep.FaultMatrix = fm
}

// faultGroup is one backend's part of the fault-matrix section: this
// report's results for it (none when it was not measured) and its rows.
type faultGroup struct {
	Family  string
	Results []*BackendResult
	Rows    []matrixfile.Row
}

// faultGroups orders the section: the report's backends first, then the
// backends only the fault matrix ran.
func faultGroups(rep *Report) []faultGroup {
	var gs []faultGroup
	at := map[string]int{}
	for _, b := range rep.Backends {
		i, ok := at[b.Backend]
		if !ok {
			i = len(gs)
			at[b.Backend] = i
			gs = append(gs, faultGroup{Family: b.Backend, Rows: b.FaultRows})
		}
		gs[i].Results = append(gs[i].Results, b)
	}
	if rep.FaultMatrix != nil {
		for _, r := range rep.FaultMatrix.Unmatched {
			fam := familyOf(r)
			i, ok := at[fam]
			if !ok {
				i = len(gs)
				at[fam] = i
				gs = append(gs, faultGroup{Family: fam})
			}
			gs[i].Rows = append(gs[i].Rows, r)
		}
	}
	return gs
}

// faultHead describes the run the rows come from.
func faultHead(rep *Report) string {
	fm := rep.FaultMatrix
	h := fm.Header
	kind := "short (CI) matrix"
	if h.Matrix == "long" {
		kind = "long matrix"
	}
	verdict := "every assertion held"
	if !h.Passed {
		verdict = "SOME ASSERTIONS FAILED (rows marked FAIL)"
	}
	s := fmt.Sprintf("Fault matrix: %s of %s, %s after each fault, %d workers per cell, TTL %s; took %s; %s",
		kind, h.Date.UTC().Format("2006-01-02 15:04 MST"), h.AfterFault, h.Workers,
		time.Duration(h.TTLMs*float64(time.Millisecond)), h.Duration, verdict)
	return s + ".\n" + provenance(h, rep, fm.Source) + "."
}

// provenance says where a fault file's rows come from: host (flagged if not
// the report's), cores, Go version, commit, file.
func provenance(h *matrixfile.Header, rep *Report, source string) string {
	var where []string
	if h.Host != "" {
		host := h.Host
		if h.Host != rep.Env.Host {
			host += " (not this report's host)"
		}
		where = append(where, "host "+host)
	}
	if h.Cores > 0 {
		where = append(where, strconv.Itoa(h.Cores)+" cores")
	}
	if h.GoVersion != "" {
		where = append(where, h.GoVersion)
	}
	if h.Commit != "" {
		where = append(where, "commit "+h.Commit)
	}
	where = append(where, "read from "+source)
	return strings.Join(where, ", ")
}

// faultLegend explains the columns.
const faultLegend = "ops: writes attempted, each a read-modify-write of a PostgreSQL counter under the lock; " +
	"guarded: through fencing.WithGuard; unguarded: the lock alone.\n" +
	"overlaps: pairs of leases whose belief intervals intersect; lost: acknowledged increments missing; " +
	"stale ok: writes accepted with a token below one already committed; lin: porcupine's verdict.\n" +
	"done after: the faulted lease's Done closing, after the resume (pause) or the fault's start; " +
	"longest wait: longest time without a grant from the fault on; test: the cell's assertions (cmd/internal/faults/README.md)."

var faultCols = []string{"deployment", "fault", "mode", "ops", "accepted", "rejected", "overlaps", "lost", "stale ok", "lin", "done after", "longest wait", "test"}

// faultCells formats a row under faultCols.
func faultCells(r matrixfile.Row) []string {
	ms := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return strconv.FormatFloat(*v, 'f', 0, 64) + " ms"
	}
	test := "pass"
	if r.Failed {
		test = "FAIL"
	}
	if e := expectation(r); e != "" {
		test = e
	}
	if r.Broken != "" {
		test += ": " + r.Broken
	}
	if r.LegitRejected > 0 {
		test += fmt.Sprintf(": %d legitimate write(s) rejected", r.LegitRejected)
	}
	return []string{r.Backend, r.Fault, r.Mode, strconv.Itoa(r.Ops), strconv.Itoa(r.Accepted), strconv.Itoa(r.Rejected),
		strconv.Itoa(r.Overlaps), strconv.FormatInt(r.LostUpdates, 10), strconv.Itoa(r.StaleAccepted), r.Linearizable,
		ms(r.DoneAfterMs), ms(r.LongestWaitMs), test}
}

// declared summarizes a backend's declared guarantees on one line.
func declared(g distlock.Guarantees) string {
	parts := make([]string, len(guaranteeRows))
	for i, gr := range guaranteeRows {
		parts[i] = gr.name + " " + gr.get(g)
	}
	return strings.Join(parts, ", ")
}

// headline are the figures repeated beside the fault rows.
var headline = []row{
	{Group: "uncontended", Name: "p50"}, {Group: "uncontended", Name: "p99"},
	{Group: "crash", Name: "free after"},
}

// measured summarizes a backend's headline figures on one line.
func measured(b *BackendResult) string {
	var parts []string
	for _, r := range headline {
		if f := b.get(r); f != nil {
			parts = append(parts, fmt.Sprintf("%s %s %s %s", r.Group, r.Name, cell(f), f.Unit))
		}
	}
	if len(parts) == 0 {
		return "no headline figures (see the measurements table)"
	}
	return strings.Join(parts, ", ") + " (all figures in the measurements table)"
}

// deployments says what each fault-harness deployment in rows declares on
// the points the faults test: it can differ from this report's backend
// (redis-aof persists; etcd3 is a cluster).
func deployments(rows []matrixfile.Row) string {
	var parts []string
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.Backend] {
			continue
		}
		seen[r.Backend] = true
		parts = append(parts, fmt.Sprintf("%s (failures tolerated %d, restart loses locks %s, clock dependent %s)",
			r.Backend, r.FailuresTolerated, yesNo(r.RestartLosesLocks), yesNo(r.ClockDependent)))
	}
	return "fault-harness deployments, as they declare: " + strings.Join(parts, "; ")
}

// writeFaultText writes the fault-matrix section of the text report.
func writeFaultText(w io.Writer, rep *Report) {
	fm := rep.FaultMatrix
	if fm == nil {
		return
	}
	fmt.Fprintln(w)
	if fm.Header == nil {
		fmt.Fprintln(w, fm.Missing)
		writeSoakText(w, rep)
		return
	}
	defer writeSoakText(w, rep)
	fmt.Fprintln(w, faultHead(rep))
	fmt.Fprintln(w, faultLegend)
	for _, s := range fm.Skipped {
		fmt.Fprintf(w, "not run: %s\n", s)
	}
	for _, g := range faultGroups(rep) {
		fmt.Fprintf(w, "\n== %s ==\n", g.Family)
		if len(g.Results) == 0 {
			fmt.Fprintln(w, "not measured in this report")
		}
		for _, b := range g.Results {
			fmt.Fprintf(w, "declared (%s): %s\n", b.URL, declared(b.Guarantees))
			fmt.Fprintf(w, "measured: %s\n", measured(b))
		}
		if len(g.Rows) == 0 {
			fmt.Fprintln(w, noRows(g))
			continue
		}
		fmt.Fprintln(w, deployments(g.Rows))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(faultCols, "\t"))
		for _, r := range g.Rows {
			fmt.Fprintln(tw, strings.Join(faultCells(r), "\t"))
		}
		tw.Flush()
	}
}

// noRows says why a backend has no fault rows.
func noRows(g faultGroup) string {
	for _, b := range g.Results {
		if b.Guarantees.SingleProcess {
			return "no fault-matrix rows for this backend: it is single-process, and the harness runs its lock holders as separate processes"
		}
	}
	return "no fault-matrix rows for this backend"
}
