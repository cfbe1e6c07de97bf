package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/distlock/distlock"
)

// writeReports prints the text table and writes the files asked for.
func writeReports(rep *Report, c *benchConfig, s stdio) int {
	var text bytes.Buffer
	writeText(&text, rep)
	_, _ = s.out.Write(text.Bytes())
	code := exitOK
	write := func(path string, data []byte) {
		if path == "" {
			return
		}
		err := os.MkdirAll(filepath.Dir(path), 0o755)
		if err == nil {
			err = os.WriteFile(path, data, 0o644)
		}
		if err != nil {
			fmt.Fprintf(s.err, "distlock %s: %v\n", rep.Kind, err)
			code = exitFailure
			return
		}
		if !c.quiet {
			fmt.Fprintf(s.err, "distlock: wrote %s\n", path)
		}
	}
	write(c.textPath, text.Bytes())
	if c.jsonPath != "" {
		b, err := json.MarshalIndent(jsonSafe(rep), "", "  ")
		if err != nil {
			fmt.Fprintf(s.err, "distlock %s: JSON: %v\n", rep.Kind, err)
			return exitFailure
		}
		write(c.jsonPath, append(b, '\n'))
	}
	if c.htmlPath != "" {
		var h bytes.Buffer
		if err := writeHTML(&h, rep); err != nil {
			fmt.Fprintf(s.err, "distlock %s: HTML: %v\n", rep.Kind, err)
			return exitFailure
		}
		write(c.htmlPath, h.Bytes())
	}
	for _, b := range rep.Backends {
		if len(b.Errors) > 0 && (code == exitOK || code == exitFailure) {
			code = max(b.exit, exitFailure) // the table is printed, but a step failed
		}
	}
	return code
}

// jsonSafe returns a copy of rep that JSON can carry: the NaN stats of a
// figure with no successful run (an empty Runs) become 0.
func jsonSafe(rep *Report) *Report {
	cp := *rep
	cp.Backends = nil
	for _, b := range rep.Backends {
		bb := *b
		bb.Figures = nil
		for _, f := range b.Figures {
			ff := *f
			for _, p := range []*float64{&ff.Stat.Min, &ff.Stat.Median, &ff.Stat.Max} {
				if math.IsNaN(*p) {
					*p = 0
				}
			}
			bb.Figures = append(bb.Figures, &ff)
		}
		cp.Backends = append(cp.Backends, &bb)
	}
	return &cp
}

// num formats a figure with about three significant digits, no exponent.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "—"
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1 || a == 0:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}

// cell is "median (min–max)" or just the value for one run.
func cell(f *Figure) string {
	if f == nil || len(f.Runs) == 0 {
		return "—"
	}
	n := num
	if f.Unit == "acq" || f.Unit == "n" { // counts
		n = func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	}
	if len(f.Runs) == 1 || f.Stat.Min == f.Stat.Max {
		return n(f.Stat.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", n(f.Stat.Median), n(f.Stat.Min), n(f.Stat.Max))
}

// cellHTML is cell with the min–max range set smaller, so that the
// measurements table stays narrow.
func cellHTML(f *Figure) template.HTML {
	c := cell(f)
	med, rng, ok := strings.Cut(c, " (")
	if !ok {
		return template.HTML(template.HTMLEscapeString(c))
	}
	return template.HTML(template.HTMLEscapeString(med) + ` <span class="rng">(` + template.HTMLEscapeString(rng) + `</span>`)
}

// htmlRow is a line of the HTML measurements table: Group is shown on the
// first line of its group only.
type htmlRow struct {
	R     row
	Group string
}

func htmlRows(rep *Report) []htmlRow {
	var out []htmlRow
	last := ""
	for _, r := range rows(rep) {
		g := r.Group
		if g == last {
			g = ""
		}
		last = r.Group
		out = append(out, htmlRow{R: r, Group: g})
	}
	return out
}

// row is one line of the figures table.
type row struct{ Group, Name, Unit string }

// rows lists every figure any backend has, in measurement order.
func rows(rep *Report) []row {
	var rs []row
	seen := map[row]bool{}
	for _, b := range rep.Backends {
		for _, f := range b.Figures {
			r := row{f.Group, f.Name, f.Unit}
			if !seen[r] {
				seen[r] = true
				rs = append(rs, r)
			}
		}
	}
	return rs
}

func (b *BackendResult) get(r row) *Figure {
	for _, f := range b.Figures {
		if f.Group == r.Group && f.Name == r.Name {
			return f
		}
	}
	return nil
}

// guaranteeRows are the Guarantees fields shown side by side.
var guaranteeRows = []struct {
	name string
	get  func(g distlock.Guarantees) string
}{
	{"token source", func(g distlock.Guarantees) string { return g.TokenSource }},
	{"wait", func(g distlock.Guarantees) string { return string(g.Wait) }},
	{"FIFO", func(g distlock.Guarantees) string { return yesNo(g.FIFO) }},
	{"failures tolerated (this run's servers)", func(g distlock.Guarantees) string { return strconv.Itoa(g.FailuresTolerated) }},
	{"clock dependent", func(g distlock.Guarantees) string { return yesNo(g.ClockDependent) }},
	{"restart loses locks", func(g distlock.Guarantees) string { return yesNo(g.RestartLosesLocks) }},
	{"session TTL", func(g distlock.Guarantees) string { return yesNo(g.SessionTTL) }},
	{"single process", func(g distlock.Guarantees) string { return yesNo(g.SingleProcess) }},
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeText(w io.Writer, rep *Report) {
	e := rep.Env
	fmt.Fprintf(w, "distlock %s — %s, %s, %d cores (GOMAXPROCS %d), %s\n", rep.Kind, e.Time.Format("2006-01-02 15:04 MST"), e.GoVersion, e.Cores, e.GOMAXPROCS, e.OS)
	if e.CPU != "" {
		fmt.Fprintf(w, "cpu: %s; kernel %s; load avg %s → %s\n", e.CPU, e.Kernel, e.LoadAvg, e.LoadAvgEnd)
	}
	fmt.Fprintf(w, "loopback TCP round trip %.0f µs; 4 KiB write+fsync %.2f ms (%s)\n", e.LoopbackRTT, e.FsyncMs, e.FsyncDir)
	for _, s := range e.Servers {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "each figure: median over %d repeats of %s (min–max); elapsed %s\n\n", rep.Repeat, rep.Duration, rep.Elapsed)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if rep.Kind == "compare" {
		fmt.Fprint(tw, "guarantee")
		for _, b := range rep.Backends {
			fmt.Fprintf(tw, "\t%s", b.Backend)
		}
		fmt.Fprintln(tw)
		for _, gr := range guaranteeRows {
			fmt.Fprint(tw, gr.name)
			for _, b := range rep.Backends {
				fmt.Fprintf(tw, "\t%s", gr.get(b.Guarantees))
			}
			fmt.Fprintln(tw)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "measurement\tfigure\tunit")
	for _, b := range rep.Backends {
		fmt.Fprintf(tw, "\t%s", b.Backend)
	}
	fmt.Fprintln(tw)
	last := ""
	for _, r := range rows(rep) {
		g := r.Group
		if g == last {
			g = ""
		}
		last = r.Group
		fmt.Fprintf(tw, "%s\t%s\t%s", g, r.Name, r.Unit)
		for _, b := range rep.Backends {
			fmt.Fprintf(tw, "\t%s", cell(b.get(r)))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if rep.Kind == "compare" {
		fmt.Fprintln(w)
		for _, b := range rep.Backends {
			for _, n := range b.Guarantees.Notes {
				fmt.Fprintf(w, "note (%s): %s\n", b.Backend, n)
			}
		}
		writeFaultText(w, rep)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, b := range rep.Backends {
		for _, e := range b.Errors {
			fmt.Fprintf(w, "error (%s): %s\n", b.Backend, e)
		}
	}
}

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"cell":        cell,
	"cellHTML":    cellHTML,
	"bad":         func(s string) bool { return s == "illegal" || strings.HasPrefix(s, "FAIL") },
	"fig":         func(b *BackendResult, r row) *Figure { return b.get(r) },
	"guar":        func(i int, b *BackendResult) string { return guaranteeRows[i].get(b.Guarantees) },
	"gname":       func(i int) string { return guaranteeRows[i].name },
	"declared":    declared,
	"measured":    measured,
	"deployments": deployments,
	"faultCells":  faultCells,
	"soakCells":   soakCells,
	"noRows":      noRows,
	"expectation": expectation,
	"seq": func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>distlock {{.R.Kind}} — {{.R.Env.Time.Format "2006-01-02 15:04 MST"}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;padding:0 1.5em;max-width:1200px;color:#222;line-height:1.4;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%;margin:1em 0}
table{border-collapse:collapse;font-size:.875em}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right;white-space:nowrap;overflow-wrap:normal;vertical-align:top}
.rng{color:#666;font-size:.85em}
.faults td:nth-child(-n+3),.faults th:nth-child(-n+3){text-align:left}
.faults td:last-child,.faults th:last-child{text-align:left;white-space:normal;min-width:6em}
.soak td:nth-child(-n+2),.soak th:nth-child(-n+2){text-align:left}
.soak td:nth-child(n+7):nth-child(-n+9){text-align:left;white-space:normal;min-width:12em}
th{background:#f4f4f4}
td:first-child,th:first-child,td.l{text-align:left}
td.w,th.w{white-space:normal;min-width:8em;text-align:left}
td.env{white-space:normal;overflow-wrap:anywhere;text-align:left}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,480px),1fr));gap:1.5em}
figure{margin:0;min-width:0}
figcaption{font-weight:600;margin-bottom:.3em}
figure svg{display:block;width:100%;height:auto}
.note{color:#555}
.notes p{margin:.3em 0;font-size:.9em}
.err{color:#a00}
td.exp{color:#555;font-style:italic}
.answer{margin:0 0 1em;padding:0;list-style:none}
.answer li{margin:.25em 0}
details{margin:1em 0}
summary{cursor:pointer;font-weight:600}
td.err{font-weight:600}
tr.g td{border-top:2px solid #999}
</style></head><body>
<h1>distlock {{.R.Kind}}</h1>
{{with .Answers}}<section id="answer"><h2>The answer</h2><ul class="answer">
{{range .}}<li><b>{{.Backend}}</b> — survives: {{.Survives}}. Costs: {{.Costs}}. Use it when {{.Use}}.</li>
{{end}}</ul></section>{{end}}
{{with .Charts}}<h2>Charts</h2>
<div class="charts">{{range .}}<figure><figcaption>{{.Title}}</figcaption>{{.SVG}}</figure>{{end}}</div>{{end}}
{{if eq .R.Kind "compare"}}
<h2>Declared guarantees</h2>
<div class="scroll"><table><tr><th>guarantee</th>{{range .R.Backends}}<th class="w">{{.Backend}}</th>{{end}}</tr>
{{range $i := seq .NG}}<tr><td>{{gname $i}}</td>{{range $.R.Backends}}<td class="w">{{guar $i .}}</td>{{end}}</tr>
{{end}}</table></div>
<details class="notes"><summary>Notes on each backend's guarantees</summary>{{range .R.Backends}}{{$b := .Backend}}{{range .Guarantees.Notes}}<p class="note"><b>{{$b}}</b>: {{.}}</p>{{end}}{{end}}</details>
{{end}}
<h2>Measurements</h2>
<div class="scroll"><table><tr><th>measurement</th><th>figure</th><th>unit</th>{{range .R.Backends}}<th>{{.Backend}}</th>{{end}}</tr>
{{range .Rows}}{{$r := .R}}<tr{{if .Group}} class="g"{{end}}><td class="l">{{.Group}}</td><td class="l">{{$r.Name}}</td><td class="l">{{$r.Unit}}</td>{{range $.R.Backends}}<td>{{cellHTML (fig . $r)}}</td>{{end}}</tr>
{{end}}</table></div>
{{with .R.FaultMatrix}}<h2>Fault matrix</h2>
{{if .Missing}}<p class="note">{{.Missing}}</p>{{else}}
<p>{{$.FaultHead}}</p>
<p class="note">{{$.FaultLegend}}</p>
{{range .Skipped}}<p class="note">not run: {{.}}</p>{{end}}
{{range $.FaultGroups}}<h3>{{.Family}}</h3>
{{range .Results}}<p>declared ({{.URL}}): {{declared .Guarantees}}<br>measured: {{measured .}}</p>{{else}}<p class="note">not measured in this report</p>{{end}}
{{if .Rows}}<p class="note">{{deployments .Rows}}</p>
<div class="scroll"><table class="faults"><tr>{{range $.FaultCols}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}{{$x := expectation .}}<tr>{{range faultCells .}}<td{{if bad .}} class="{{if $x}}exp{{else}}err{{end}}"{{else if eq . $x}} class="exp"{{end}}>{{.}}</td>{{end}}</tr>
{{end}}</table></div>{{else}}<p class="note">{{noRows .}}</p>{{end}}
{{end}}{{end}}
{{with .Soak}}<h2>Randomized faults (soak)</h2>
<p>{{$.SoakHead}}</p>
<p class="note">{{$.SoakLegend}}</p>
{{range $.SoakGroups}}<h3>{{.Family}}</h3>
<div class="scroll"><table class="soak"><tr>{{range $.SoakCols}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range soakCells .}}<td{{if bad .}} class="err"{{end}}>{{.}}</td>{{end}}</tr>
{{end}}</table></div>
{{end}}{{end}}{{end}}
{{range .R.Notes}}<p class="note">note: {{.}}</p>{{end}}
{{range .R.Backends}}{{$b := .Backend}}{{range .Errors}}<p class="err">error ({{$b}}): {{.}}</p>{{end}}{{end}}
<details id="environment"><summary>Environment and method</summary>
<div class="scroll"><table>
<tr><td>time</td><td class="env">{{.R.Env.Time.Format "2006-01-02 15:04:05 MST"}} (elapsed {{.R.Elapsed}})</td></tr>
<tr><td>host</td><td class="env">{{.R.Env.Host}} — {{.R.Env.OS}}, kernel {{.R.Env.Kernel}}</td></tr>
<tr><td>CPU</td><td class="env">{{.R.Env.CPU}}: {{.R.Env.Cores}} cores, GOMAXPROCS {{.R.Env.GOMAXPROCS}}</td></tr>
<tr><td>load average (1, 5, 15 min)</td><td class="env">{{.R.Env.LoadAvg}} at start, {{.R.Env.LoadAvgEnd}} at end</td></tr>
<tr><td>Go</td><td class="env">{{.R.Env.GoVersion}}</td></tr>
<tr><td>loopback TCP round trip (median)</td><td class="env">{{printf "%.0f" .R.Env.LoopbackRTT}} µs</td></tr>
<tr><td>4 KiB write + fsync (median)</td><td class="env">{{printf "%.2f" .R.Env.FsyncMs}} ms in {{.R.Env.FsyncDir}}</td></tr>
{{range .R.Env.Servers}}<tr><td>server</td><td class="env">{{.}}</td></tr>
{{end}}<tr><td>method</td><td class="env">each figure is the median over {{.R.Repeat}} repeats of {{.R.Duration}}, with min–max beside it; backends measured side by side, repeat by repeat</td></tr>
</table></div>
</details>
<p class="note">URLs: {{range .R.Backends}}{{.URL}} {{end}}</p>
</body></html>
`))

func writeHTML(w io.Writer, rep *Report) error {
	charts, err := makeCharts(rep)
	if err != nil {
		return err
	}
	data := map[string]any{
		"R":      rep,
		"NG":     len(guaranteeRows),
		"Rows":   htmlRows(rep),
		"Charts": charts,
	}
	if rep.Kind == "compare" {
		data["Answers"] = answers(rep)
	}
	if fm := rep.FaultMatrix; fm != nil && fm.Header != nil {
		data["FaultHead"] = faultHead(rep)
		data["FaultLegend"] = faultLegend
		data["FaultGroups"] = faultGroups(rep)
		data["FaultCols"] = faultCols
	}
	if fm := rep.FaultMatrix; fm != nil && fm.Soak != nil {
		data["SoakHead"] = soakHead(rep)
		data["SoakLegend"] = soakLegend
		data["SoakGroups"] = soakGroups(fm.Soak)
		data["SoakCols"] = soakCols
	}
	return htmlTmpl.Execute(w, data)
}
