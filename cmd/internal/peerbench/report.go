package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is everything one peerbench run measured.
type Report struct {
	Machine  Machine `json:"machine"`
	Duration string  `json:"duration"` // of one run
	Runs     int     `json:"runs"`     // per side
	Method   string  `json:"method"`
	// ObserveMethod is how the observer-latency scenario measures.
	ObserveMethod string  `json:"observe_method,omitempty"`
	Cells         []*Cell `json:"cells"`
	// Observe is the observer-latency scenario: distlock's election per
	// backend and etcd's concurrency.Election (see ObserveMethod).
	Observe []*ObserveCell `json:"observe,omitempty"`
	Notes   []string       `json:"notes,omitempty"`
	Errors  []string       `json:"errors,omitempty"`
}

// Machine is where the figures come from.
type Machine struct {
	Date       string            `json:"date"`
	CPU        string            `json:"cpu"`
	Cores      int               `json:"cores"`
	GOMAXPROCS int               `json:"gomaxprocs"`
	GoVersion  string            `json:"go_version"`
	OS         string            `json:"os"`
	LoadStart  string            `json:"load_avg_start,omitempty"` // 1, 5, 15 min
	LoadEnd    string            `json:"load_avg_end,omitempty"`
	Servers    map[string]string `json:"servers"` // pair id → what served it
}

// Cell is one scenario on one pair: every run of both sides, the medians
// and their ratios (distlock / peer).
type Cell struct {
	Pair     string        `json:"pair"`
	Title    string        `json:"pair_title"`
	Scenario string        `json:"scenario"`
	ScTitle  string        `json:"scenario_title"`
	Distlock []measurement `json:"distlock_runs"`
	Peer     []measurement `json:"peer_runs"`
	DL       summary       `json:"distlock"`
	PR       summary       `json:"peer"`
	// OpsRatio is distlock's ops/s over the peer's (higher is better);
	// WaitP99Ratio distlock's p99 wait over the peer's (lower is better).
	OpsRatio     float64 `json:"ops_ratio"`
	WaitP99Ratio float64 `json:"wait_p99_ratio"`
}

// summary is the per-figure medians of a side's runs.
type summary struct {
	OpsPerSec   float64 `json:"ops_per_s"`
	WaitP50Ms   float64 `json:"wait_p50_ms"`
	WaitP99Ms   float64 `json:"wait_p99_ms"`
	AllocsPerOp float64 `json:"allocs_per_op,omitempty"`
	BytesPerOp  float64 `json:"bytes_per_op,omitempty"`
	RegrantPct  float64 `json:"regrant_pct"`
}

const method = "each pair on its own loopback servers started here; per scenario the sides alternate " +
	"(distlock, peer, distlock, peer …); one client with its own connection pool / session per worker, " +
	"workers are goroutines of one process; a worker locks the same key each time (waiting acquire, TTL 10s, " +
	"no auto-renew); figures are medians over the runs; wait = acquire call to grant"

const observeMethod = "observer latency: two candidates (each its own client) campaign for one role again and again; " +
	"the leader holds until the observer (a third client) has reported it, then a random %v..%v more, and resigns, " +
	"so the other, already waiting, is elected; elected→notified = from the new leader's Campaign returning to the " +
	"observer receiving it (one monotonic clock; negative when the observer hears first, counted as 'observer first'); " +
	"resign→notified = from the old leader's Resign call to the observer receiving the successor; resign→elected = " +
	"from that Resign call to the successor's Campaign returning (the hand-over as the candidates see it); percentiles over " +
	"every change of every run (the first term of a run is not counted); rows of one backend interleave run by run; " +
	"distlock with default settings unless a WithBackoff is named; bsm/redislock, redsync and zk.Lock have no election, " +
	"so etcd's concurrency.Election (library defaults, session TTL 60s) on the etcd server is the reference row for all"

// benchmark starts the servers and measures every wanted pair. It returns
// a report even on error (with what was measured until then).
func benchmark(ctx context.Context, c config) (*Report, error) {
	rep := &Report{Machine: machine(), Duration: c.duration.String(), Runs: c.runs, Method: method}
	if c.wantsScenario(observeID) {
		rep.ObserveMethod = fmt.Sprintf(observeMethod, c.observeHold.min, c.observeHold.max)
	}
	srv := startServers(ctx, c)
	defer srv.Close()
	rep.Machine.Servers = srv.versions
	for _, p := range pairs {
		if !c.wants(p.id) {
			continue
		}
		if err, ok := srv.missing[p.id]; ok {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s not measured: %v", p.title, err))
			continue
		}
		cells, errs := benchPair(ctx, c, p, srv.addrs[p.id])
		rep.Cells = append(rep.Cells, cells...)
		rep.Errors = append(rep.Errors, errs...)
		if c.wantsScenario(observeID) && ctx.Err() == nil {
			ocells, errs := benchObserve(ctx, c, p, srv.addrs[p.id])
			rep.Observe = append(rep.Observe, ocells...)
			rep.Errors = append(rep.Errors, errs...)
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	rep.Machine.LoadEnd = loadAvg()
	return rep, nil
}

// benchPair runs every scenario on p, the two sides interleaved run by run.
func benchPair(ctx context.Context, c config, p *pair, addrs []string) ([]*Cell, []string) {
	var cells []*Cell
	var errs []string
	for _, sc := range scenarios {
		if !c.wantsScenario(sc.id) {
			continue
		}
		cell := &Cell{Pair: p.id, Title: p.title, Scenario: sc.id, ScTitle: sc.title}
		failed := false
		for r := range c.runs {
			for _, s := range []side{p.distlock(), p.peer} {
				if ctx.Err() != nil {
					return cells, errs
				}
				c.note("%-24s %-30s run %d/%d  %s", p.title, sc.title, r+1, c.runs, s.name)
				m, err := measure(ctx, s, addrs, c, sc, c.duration)
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s, %s, %s: %v", p.title, sc.title, s.name, err))
					failed = true
					break
				}
				if s.name == p.peer.name {
					cell.Peer = append(cell.Peer, m)
				} else {
					cell.Distlock = append(cell.Distlock, m)
				}
			}
			if failed {
				break
			}
		}
		if !failed {
			cell.summarize()
			cells = append(cells, cell)
		}
	}
	return cells, errs
}

func (cl *Cell) summarize() {
	cl.DL, cl.PR = summarize(cl.Distlock), summarize(cl.Peer)
	cl.OpsRatio = ratio(cl.DL.OpsPerSec, cl.PR.OpsPerSec)
	cl.WaitP99Ratio = ratio(cl.DL.WaitP99Ms, cl.PR.WaitP99Ms)
}

func summarize(ms []measurement) summary {
	pick := func(f func(measurement) float64) float64 {
		xs := make([]float64, len(ms))
		for i, m := range ms {
			xs[i] = f(m)
		}
		return median(xs)
	}
	return summary{
		OpsPerSec:   pick(func(m measurement) float64 { return m.OpsPerSec }),
		WaitP50Ms:   pick(func(m measurement) float64 { return m.WaitP50Ms }),
		WaitP99Ms:   pick(func(m measurement) float64 { return m.WaitP99Ms }),
		AllocsPerOp: pick(func(m measurement) float64 { return m.AllocsPerOp }),
		BytesPerOp:  pick(func(m measurement) float64 { return m.BytesPerOp }),
		RegrantPct:  pick(func(m measurement) float64 { return m.RegrantPct }),
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func machine() Machine {
	return Machine{
		Date:       time.Now().UTC().Format(time.RFC3339),
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		LoadStart:  loadAvg(),
	}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// printReport writes the machine, the long table (every figure) and the
// ratio matrix (scenario × pair), and the observer-latency table.
func printReport(w io.Writer, rep *Report) {
	m := rep.Machine
	fmt.Fprintf(w, "distlock vs peers: %d run(s) of %s per side, interleaved, medians\n", rep.Runs, rep.Duration)
	fmt.Fprintf(w, "machine: %s, %d cores (GOMAXPROCS %d), %s %s, %s", m.CPU, m.Cores, m.GOMAXPROCS, m.GoVersion, m.OS, m.Date)
	if m.LoadStart != "" {
		fmt.Fprintf(w, ", load avg %s at start, %s at end", m.LoadStart, m.LoadEnd)
	}
	fmt.Fprintln(w)
	var srv []string
	for _, p := range pairs {
		if v, ok := m.Servers[p.id]; ok {
			srv = append(srv, p.id+": "+v)
		}
	}
	if len(srv) > 0 {
		fmt.Fprintf(w, "servers (loopback): %s\n", strings.Join(srv, "; "))
	}
	if len(rep.Cells) > 0 {
		fmt.Fprintf(w, "method: %s\n\n", rep.Method)
	}

	if len(rep.Cells) > 0 {
		printLockTables(w, rep)
	}
	if len(rep.Observe) > 0 {
		fmt.Fprintf(w, "\nobserver latency (leader change → observer notified):\n%s\n\n", rep.ObserveMethod)
		writeTable(w, observeTable(rep), 2)
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(w, "error:", e)
	}
}

// printLockTables writes the lock scenarios' long table, the allocations
// and the ratio matrix.
func printLockTables(w io.Writer, rep *Report) {
	rows := [][]string{{"scenario", "pair", "distlock ops/s", "peer ops/s", "ratio", "distlock p99 wait ms", "peer p99 wait ms", "p99 ratio",
		"distlock re-grants", "peer re-grants"}}
	for _, c := range rep.Cells {
		regrants := []string{"", ""}
		if sc := scenarioByID(c.Scenario); sc != nil && sc.workers > sc.keys {
			regrants = []string{fmt.Sprintf("%.0f%%", c.DL.RegrantPct), fmt.Sprintf("%.0f%%", c.PR.RegrantPct)}
		}
		rows = append(rows, append([]string{c.ScTitle, c.Title,
			fmt.Sprintf("%.0f", c.DL.OpsPerSec), fmt.Sprintf("%.0f", c.PR.OpsPerSec), fmt.Sprintf("%.2f×", c.OpsRatio),
			fmt.Sprintf("%.2f", c.DL.WaitP99Ms), fmt.Sprintf("%.2f", c.PR.WaitP99Ms), fmt.Sprintf("%.2f×", c.WaitP99Ratio)}, regrants...))
	}
	writeTable(w, rows, 2)

	fmt.Fprintln(w, "\nallocations per uncontended acquire+release (this process, medians):")
	rows = [][]string{{"pair", "distlock allocs/op", "distlock B/op", "peer allocs/op", "peer B/op"}}
	for _, c := range rep.Cells {
		if c.Scenario == "uncontended" {
			rows = append(rows, []string{c.Title, fmt.Sprintf("%.0f", c.DL.AllocsPerOp), fmt.Sprintf("%.0f", c.DL.BytesPerOp),
				fmt.Sprintf("%.0f", c.PR.AllocsPerOp), fmt.Sprintf("%.0f", c.PR.BytesPerOp)})
		}
	}
	writeTable(w, rows, 1)

	fmt.Fprintln(w, "\nratios, distlock / peer (ops/s: higher is better; p99 wait: lower is better):")
	fmt.Fprint(w, matrix(rep))
	if rows := targetRows(rep); len(rows) > 1 {
		fmt.Fprintln(w, "\ntargets (ratios of this run; a miss's measured cause is in docs/performance.md):")
		writeTable(w, rows, 4)
	}
}

// matrix is the Markdown table of ratios: a row per scenario, a column per
// measured pair.
func matrix(rep *Report) string {
	var cols []*pair
	for _, p := range pairs {
		if slices.ContainsFunc(rep.Cells, func(c *Cell) bool { return c.Pair == p.id }) {
			cols = append(cols, p)
		}
	}
	if len(cols) == 0 {
		return "(nothing measured)\n"
	}
	var b strings.Builder
	b.WriteString("| scenario |")
	for _, p := range cols {
		b.WriteString(" " + p.title + " |")
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, sc := range scenarios {
		label := sc.title + " ops/s"
		if sc.hold > 0 {
			label = sc.title + ": ops/s, p99 wait"
		}
		b.WriteString("| " + label + " |")
		for _, p := range cols {
			i := slices.IndexFunc(rep.Cells, func(c *Cell) bool { return c.Pair == p.id && c.Scenario == sc.id })
			switch {
			case i < 0:
				b.WriteString(" – |")
			case sc.hold > 0:
				fmt.Fprintf(&b, " %.2f×, %.2f× |", rep.Cells[i].OpsRatio, rep.Cells[i].WaitP99Ratio)
			default:
				fmt.Fprintf(&b, " %.2f× |", rep.Cells[i].OpsRatio)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// writeTable writes rows as aligned columns: the first left columns
// left-aligned (text), the others right-aligned (figures).
func writeTable(w io.Writer, rows [][]string, left int) {
	var width []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < left {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
