package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	return f, path, nil
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
	where = append(where, "read from "+fm.Source)
	return s + ".\n" + strings.Join(where, ", ") + "."
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
		return
	}
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
