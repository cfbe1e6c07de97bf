package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

// reportFixture is a compare report of a real run (testdata, without its
// fault rows) with the fault-matrix fixture attached, uncontended samples
// made up from its percentiles, and holes that shift series indexes from
// one chart to the next: memory has no hand-off figures (it is missing
// from that chart), etcd no crash figure (missing from the bar chart).
func reportFixture(t *testing.T) *Report {
	t.Helper()
	b, err := os.ReadFile("testdata/compare-report.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Backends) != 5 {
		t.Fatalf("fixture has %d backends, want 5", len(rep.Backends))
	}
	for _, be := range rep.Backends {
		be.Samples = map[string][]float64{"uncontended": madeUpSamples(t, be)}
		var keep []*Figure
		for _, f := range be.Figures {
			if be.Backend == "memory" && strings.HasPrefix(f.Group, "hand-off") ||
				be.Backend == "etcd" && f.Group == "crash" {
				continue
			}
			keep = append(keep, f)
		}
		be.Figures = keep
	}
	fm, err := matrixfile.Read(faultsFixture)
	if err != nil {
		t.Fatal(err)
	}
	attachFaults(&rep, fm, faultsFixture)
	return &rep
}

// madeUpSamples are 1000 latencies whose p50, p99 and p99.9 are the
// backend's uncontended figures.
func madeUpSamples(t *testing.T, b *BackendResult) []float64 {
	t.Helper()
	get := func(name string) float64 {
		f := b.get(row{Group: "uncontended", Name: name})
		if f == nil {
			t.Fatalf("%s: no uncontended %s", b.Backend, name)
		}
		return f.Stat.Median
	}
	p50, p99, p999 := get("p50"), get("p99"), get("p99.9")
	var s []float64
	for i := range 1000 {
		switch {
		case i < 500:
			s = append(s, p50*(0.5+float64(i)/1000))
		case i < 990:
			s = append(s, p50+(p99-p50)*float64(i-500)/490)
		default:
			s = append(s, p99+(p999-p99)*float64(i-990)/9)
		}
	}
	return s
}

// reportSVGs renders rep's HTML report and returns the SVGs it embeds.
func reportSVGs(t *testing.T, rep *Report) []string {
	t.Helper()
	var h bytes.Buffer
	if err := writeHTML(&h, rep); err != nil {
		t.Fatal(err)
	}
	var svgs []string
	s := h.String()
	for {
		i := strings.Index(s, "<svg")
		if i < 0 {
			break
		}
		j := strings.Index(s[i:], "</svg>")
		if j < 0 {
			t.Fatalf("unterminated <svg> in the report")
		}
		svgs = append(svgs, s[i:i+j+len("</svg>")])
		s = s[i+j:]
	}
	return svgs
}

var (
	svgNumber  = regexp.MustCompile(`[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?`)
	svgNonReal = regexp.MustCompile(`(?i)nan|inf`)
	// geometric are the attributes that hold coordinates or lengths.
	geometric = map[string]bool{"x": true, "y": true, "x1": true, "y1": true, "x2": true, "y2": true,
		"cx": true, "cy": true, "r": true, "rx": true, "ry": true, "width": true, "height": true,
		"d": true, "points": true, "transform": true, "viewBox": true}
)

// svgProblems parses svg as XML and lists every coordinate that is not a
// finite number of sensible size (|v| ≤ 1e6).
func svgProblems(svg string) []string {
	var probs []string
	d := xml.NewDecoder(strings.NewReader(svg))
	d.Strict = true
	elems := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return append(probs, "not well-formed XML: "+err.Error())
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		elems++
		for _, a := range se.Attr {
			if !geometric[a.Name.Local] {
				continue
			}
			v := a.Value
			if a.Name.Local == "transform" { // rotate(90.00,537,146): numbers only
				v = strings.NewReplacer("rotate", "", "translate", "", "scale", "").Replace(v)
			}
			if svgNonReal.MatchString(v) {
				probs = append(probs, fmt.Sprintf("<%s %s=%q>: not a finite number", se.Name.Local, a.Name.Local, a.Value))
				continue
			}
			for _, n := range svgNumber.FindAllString(v, -1) {
				f, err := strconv.ParseFloat(n, 64)
				if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e6 {
					probs = append(probs, fmt.Sprintf("<%s %s=%q>: absurd coordinate %s", se.Name.Local, a.Name.Local, shorten(a.Value), n))
					break
				}
			}
		}
	}
	if elems < 10 {
		probs = append(probs, fmt.Sprintf("only %d elements: not a chart", elems))
	}
	return probs
}

func shorten(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// TestReportSVGValid parses every SVG the HTML report embeds as XML and
// fails on any coordinate that is not finite or is absurd: go-chart drew an
// unused secondary y axis over an empty range, with ticks at
// y = -9223372036854775498.
func TestReportSVGValid(t *testing.T) {
	cases := map[string]func(*Report){
		"real run": func(*Report) {},
		// Every bar at 0: the bar chart's range must not be empty either.
		"crash all zero": func(rep *Report) {
			for _, b := range rep.Backends {
				if f := b.get(row{Group: "crash", Name: "free after"}); f != nil {
					f.Runs, f.Stat = []float64{0}, Stat{}
				}
			}
		},
		// All lines flat and equal: a one-decade axis.
		"flat": func(rep *Report) {
			for _, b := range rep.Backends {
				for i := range b.Samples["uncontended"] {
					b.Samples["uncontended"][i] = 1
				}
				for _, f := range b.Figures {
					f.Stat = Stat{1, 1, 1}
				}
			}
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			rep := reportFixture(t)
			change(rep)
			svgs := reportSVGs(t, rep)
			if len(svgs) != 4 {
				t.Fatalf("%d SVGs in the report, want 4 charts", len(svgs))
			}
			for i, svg := range svgs {
				for _, p := range svgProblems(svg) {
					t.Errorf("chart %d: %s", i+1, p)
				}
			}
		})
	}
}

// TestSVGProblemsCatches checks the checker on the SVG go-chart wrote
// before the fix, and on NaN and malformed XML.
func TestSVGProblemsCatches(t *testing.T) {
	good := `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10">` + strings.Repeat(`<path d="M 1 2 L 3 4"/>`, 10)
	for _, bad := range []string{
		good + `<text x="-18" y="-9223372036854775498">0.00</text></svg>`,
		good + `<path d="M 18 NaN L 13 0"/></svg>`,
		good + `<circle cx="1e7" cy="0" r="1"/></svg>`,
		good + `<text x="1" y="1">a < b</text></svg>`,
	} {
		if len(svgProblems(bad)) == 0 {
			t.Errorf("no problem found in %s", bad[len(good):])
		}
	}
	if p := svgProblems(good + `</svg>`); len(p) != 0 {
		t.Errorf("problems in a good SVG: %v", p)
	}
}

// svgShape is a coloured mark of a chart: a path's vertices or a circle.
type svgShape struct {
	color string
	pts   [][2]float64
}

// svgLabel is a text element.
type svgLabel struct {
	text string
	x, y float64
}

var (
	svgRGBA    = regexp.MustCompile(`(stroke|fill):rgba\((\d+),(\d+),(\d+),([0-9.]+)\)`)
	svgMoveTos = regexp.MustCompile(`[ML] (-?\d+) (-?\d+)`)
)

// svgColor is the colour of a mark from its style: its stroke, or its fill,
// whichever is neither grey nor transparent ("" for none: axes, grid, text).
func svgColor(style string) string {
	for _, want := range []string{"stroke", "fill"} {
		for _, m := range svgRGBA.FindAllStringSubmatch(style, -1) {
			if m[1] != want || m[5] == "0.0" || m[5] == "0" || (m[2] == m[3] && m[3] == m[4]) {
				continue
			}
			return "rgb(" + m[2] + "," + m[3] + "," + m[4] + ")"
		}
	}
	return ""
}

// parseChart returns a chart's coloured marks and its text labels.
func parseChart(t *testing.T, svg string) (shapes []svgShape, labels []svgLabel) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var cur *svgLabel
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return shapes, labels
		}
		if err != nil {
			t.Fatal(err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range tok.Attr {
				attr[a.Name.Local] = a.Value
			}
			num := func(k string) float64 { f, _ := strconv.ParseFloat(attr[k], 64); return f }
			switch tok.Name.Local {
			case "path":
				if c := svgColor(attr["style"]); c != "" {
					sh := svgShape{color: c}
					for _, m := range svgMoveTos.FindAllStringSubmatch(attr["d"], -1) {
						x, _ := strconv.ParseFloat(m[1], 64)
						y, _ := strconv.ParseFloat(m[2], 64)
						sh.pts = append(sh.pts, [2]float64{x, y})
					}
					shapes = append(shapes, sh)
				}
			case "circle":
				if c := svgColor(attr["style"]); c != "" {
					shapes = append(shapes, svgShape{color: c, pts: [][2]float64{{num("cx"), num("cy")}}})
				}
			case "text":
				cur = &svgLabel{x: num("x"), y: num("y")}
			}
		case xml.CharData:
			if cur != nil {
				cur.text += string(tok)
			}
		case xml.EndElement:
			if tok.Name.Local == "text" && cur != nil {
				labels = append(labels, *cur)
				cur = nil
			}
		}
	}
}

// segDist is the distance from p to the segment a–b.
func segDist(p, a, b [2]float64) float64 {
	dx, dy := b[0]-a[0], b[1]-a[1]
	u := 0.0
	if l := dx*dx + dy*dy; l > 0 {
		u = max(0, min(1, ((p[0]-a[0])*dx+(p[1]-a[1])*dy)/l))
	}
	return math.Hypot(p[0]-a[0]-u*dx, p[1]-a[1]-u*dy)
}

// labelColors maps each backend name written in a chart to the colour of
// the coloured mark nearest to the label: the legend's swatch beside it,
// or the bar above it.
func labelColors(t *testing.T, svg string, backends []string) map[string]string {
	t.Helper()
	shapes, labels := parseChart(t, svg)
	out := map[string]string{}
	for _, l := range labels {
		if !contains(backends, l.text) {
			continue
		}
		p := [2]float64{l.x, l.y - 4}
		best, color := math.Inf(1), ""
		for _, sh := range shapes {
			for i := range sh.pts {
				d := segDist(p, sh.pts[i], sh.pts[max(i-1, 0)])
				if d < best {
					best, color = d, sh.color
				}
			}
		}
		if best > 40 {
			t.Errorf("label %q: no coloured mark within 40 px (nearest %.0f px)", l.text, best)
		}
		out[l.text] = color
	}
	return out
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// TestChartBackendColors checks that a backend has one colour in every
// chart, and different backends different colours, when backends are
// missing from some charts (which shifts go-chart's colour-by-index).
func TestChartBackendColors(t *testing.T) {
	rep := reportFixture(t)
	var names []string
	for _, b := range rep.Backends {
		names = append(names, b.Backend)
	}
	charts, err := makeCharts(rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(charts) != 4 {
		t.Fatalf("%d charts, want 4", len(charts))
	}
	first := map[string]string{}   // backend → colour
	firstIn := map[string]string{} // backend → chart it was first seen in
	for _, c := range charts {
		colors := labelColors(t, string(c.SVG), names)
		want := len(names)
		if strings.HasPrefix(c.Title, "Hand-off") || strings.HasPrefix(c.Title, "Crashed") {
			want-- // memory has no hand-off figures, etcd no crash figure
		}
		if len(colors) != want {
			t.Errorf("%q: labelled backends %v, want %d", c.Title, colors, want)
		}
		for b, col := range colors {
			if f, ok := first[b]; !ok {
				first[b], firstIn[b] = col, c.Title
			} else if f != col {
				t.Errorf("%s is %s in %q but %s in %q", b, f, firstIn[b], col, c.Title)
			}
		}
	}
	seen := map[string]string{}
	for b, col := range first {
		if o, ok := seen[col]; ok {
			t.Errorf("%s and %s have the same colour %s", o, b, col)
		}
		seen[col] = b
	}
}

// TestChartLegendBesidePlot checks that the line charts' legends lie right
// of every data point, so that they cover no line.
func TestChartLegendBesidePlot(t *testing.T) {
	rep := reportFixture(t)
	var names []string
	for _, b := range rep.Backends {
		names = append(names, b.Backend)
	}
	charts, err := makeCharts(rep)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, c := range charts {
		shapes, labels := parseChart(t, string(c.SVG))
		right := math.Inf(-1) // of the data lines (3+ vertices)
		for _, sh := range shapes {
			if len(sh.pts) < 3 {
				continue
			}
			for _, p := range sh.pts {
				right = max(right, p[0])
			}
		}
		if strings.HasPrefix(c.Title, "Crashed") {
			continue // the bar chart: labelled on its x axis, no legend
		}
		lines++
		for _, l := range labels {
			if contains(names, l.text) && l.x <= right+20 {
				t.Errorf("%q: legend label %q at x=%v is within the plot (data reach x=%v)", c.Title, l.text, l.x, right)
			}
		}
	}
	if lines != 3 {
		t.Errorf("%d line charts, want 3", lines)
	}
}

// TestCompareFaultsMissingSaysHow checks that --help and a report without
// fault rows say plainly that the installed binary cannot produce them, and
// how to get them.
func TestCompareFaultsMissingSaysHow(t *testing.T) {
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	help := norm(compareHelp)
	for _, want := range []string{"An installed distlock cannot run it", sourceRepo, matrixfile.Command(defaultFaults), "--faults"} {
		if !strings.Contains(help, want) {
			t.Errorf("compare --help lacks %q", want)
		}
	}
	rep := reportFixture(t)
	attachFaults(rep, nil, "")
	var h, txt bytes.Buffer
	if err := writeHTML(&h, rep); err != nil {
		t.Fatal(err)
	}
	writeText(&txt, rep)
	for name, out := range map[string]string{"HTML": h.String(), "text": txt.String()} {
		out = norm(strings.ReplaceAll(out, "&#39;", "'"))
		for _, want := range []string{"no rows in this report", "the distlock binary cannot run it", sourceRepo, "make faults"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s report without fault rows lacks %q", name, want)
			}
		}
	}
}
