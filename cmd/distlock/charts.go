package main

import (
	"bytes"
	"cmp"
	"fmt"
	"hash/fnv"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"

	chart "github.com/wcharczuk/go-chart/v2"
	"github.com/wcharczuk/go-chart/v2/drawing"
)

// chartView is one rendered chart: inline SVG, so the report is one file.
type chartView struct {
	Title string
	SVG   template.HTML
}

// Latencies span µs (memory) to tens of ms (ZooKeeper), so charts plot
// log10 of the value on a linear axis with labelled decade ticks (go-chart's
// own logarithmic range does not handle values below 1).
var (
	usDecades  = []string{"1µs", "10µs", "100µs", "1ms", "10ms", "100ms", "1s", "10s"}
	numDecades = []string{"1", "10", "100", "1k", "10k", "100k", "1M", "10M"}
)

// decadeAxis returns a y axis over [lo, hi] (log10 values) with a tick at
// each decade, labelled from labels (labels[0] is 10^0).
func decadeAxis(name string, lo, hi float64, labels []string) chart.YAxis {
	a, b := math.Floor(lo), math.Ceil(hi)
	if b <= a {
		b = a + 1
	}
	a, b = max(a, 0), min(b, float64(len(labels)-1))
	var ticks []chart.Tick
	for e := a; e <= b; e++ {
		ticks = append(ticks, chart.Tick{Value: e, Label: labels[int(e)]})
	}
	return chart.YAxis{Name: name, Range: &chart.ContinuousRange{Min: a, Max: b}, Ticks: ticks}
}

// chartFormat is SVG; a test may switch it to PNG to look at the charts.
var chartFormat chart.RendererProvider = chart.SVG

func log10us(msv float64) float64 { return math.Log10(max(msv*1000, 1)) }

// finite reports whether v can be plotted (not NaN, not ±Inf).
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// backendColors gives each backend one colour in every chart (the
// Okabe–Ito palette, distinguishable with the common colour-vision
// deficiencies). go-chart's own colours go by series index, so a backend
// missing from one chart would shift every colour after it.
var backendColors = map[string]drawing.Color{
	"memory":    drawing.ColorFromHex("0072B2"), // blue
	"redis":     drawing.ColorFromHex("D55E00"), // vermillion
	"redlock":   drawing.ColorFromHex("CC79A7"), // reddish purple
	"etcd":      drawing.ColorFromHex("009E73"), // bluish green
	"zookeeper": drawing.ColorFromHex("E69F00"), // orange
	"postgres":  drawing.ColorFromHex("56B4E9"), // sky blue
}

// extraColors are for backends backendColors does not name, picked by a
// hash of the name, so that they too are the same in every chart.
var extraColors = []drawing.Color{
	drawing.ColorFromHex("332288"), drawing.ColorFromHex("000000"), drawing.ColorFromHex("8C564B"),
	drawing.ColorFromHex("7F7F7F"), drawing.ColorFromHex("B8A000"),
}

// backendColor is the colour of backend name in every chart.
func backendColor(name string) drawing.Color {
	if c, ok := backendColors[name]; ok {
		return c
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return extraColors[h.Sum32()%uint32(len(extraColors))]
}

// backendSeries is one backend's line, in its colour, with dots at the
// measured points.
func backendSeries(name string, xs, ys []float64) chart.Series {
	c := backendColor(name)
	return chart.ContinuousSeries{Name: name, XValues: xs, YValues: ys,
		Style: chart.Style{StrokeColor: c, StrokeWidth: 2, DotColor: c, DotWidth: 2.5}}
}

const (
	chartWidth, chartHeight = 640, 360
	// legendWidth is the strip right of the plot and its y axis that holds
	// the legend, so that the legend never covers a line.
	legendWidth = 104
)

// legendRight draws c's legend in the strip of width legendWidth at the
// right edge of the chart, outside the plot: one short line in the
// series' colour, then its name, per series.
func legendRight(c *chart.Chart) chart.Renderable {
	return func(r chart.Renderer, cb chart.Box, defaults chart.Style) {
		// defaults.Font is the font Render loaded (c's own is nil).
		style := chart.Style{FontSize: 10, FontColor: chart.DefaultTextColor, Font: defaults.Font}
		style.GetTextOptions().WriteToRenderer(r)
		x := c.Width - legendWidth + 10
		y := cb.Top + 4
		for _, s := range c.Series {
			st := s.GetStyle()
			if st.Hidden {
				continue
			}
			tb := r.MeasureText(s.GetName())
			ly := y + tb.Height()/2
			r.SetStrokeColor(st.StrokeColor)
			r.SetStrokeWidth(3)
			r.SetStrokeDashArray(nil)
			r.MoveTo(x, ly)
			r.LineTo(x+16, ly)
			r.Stroke()
			style.GetTextOptions().WriteToRenderer(r)
			r.Text(s.GetName(), x+22, y+tb.Height())
			y += tb.Height() + 8
		}
	}
}

// lineChart renders series (one per backend) sharing an x axis.
func lineChart(xName string, y chart.YAxis, xTicks []chart.Tick, series []chart.Series) (template.HTML, error) {
	g := chart.Chart{
		Width: chartWidth, Height: chartHeight,
		Background: chart.Style{Padding: chart.Box{Top: 24, Left: 16, Right: legendWidth, Bottom: 12}},
		XAxis:      chart.XAxis{Name: xName, Ticks: xTicks},
		YAxis:      y,
		// No series uses the secondary axis, but go-chart draws it unless
		// it is hidden, over an empty range (0..0): its ticks' positions
		// are 0/0, which int() turns into -9223372036854775808 (+ offset).
		YAxisSecondary: chart.YAxis{Style: chart.Hidden()},
		Series:         series,
	}
	g.Elements = []chart.Renderable{legendRight(&g)}
	var buf bytes.Buffer
	if err := g.Render(chartFormat, &buf); err != nil {
		return "", err
	}
	return template.HTML(stripXMLHeader(buf.String())), nil
}

func stripXMLHeader(svg string) string {
	if i := strings.Index(svg, "<svg"); i > 0 {
		return svg[i:]
	}
	return svg
}

// makeCharts draws the report's charts. A chart that cannot be drawn (too
// few points) is left out.
func makeCharts(rep *Report) ([]chartView, error) {
	var out []chartView
	add := func(title string, svg template.HTML, err error) {
		if err == nil && svg != "" {
			out = append(out, chartView{title, svg})
		}
	}

	// 1. Uncontended latency by percentile, all repeats pooled.
	{
		// x is the "nines" of the percentile, -log10(1-p/100), so the tail
		// (p99, p99.9) gets as much room as the body.
		ps := []float64{0, 10, 25, 50, 75, 90, 95, 98, 99, 99.5, 99.8, 99.9}
		nines := func(p float64) float64 { return -math.Log10(1 - p/100) }
		xticks := []chart.Tick{{Value: 0, Label: "p0"}, {Value: nines(50), Label: "p50"}, {Value: 1, Label: "p90"}, {Value: 2, Label: "p99"}, {Value: 3, Label: "p99.9"}}
		var series []chart.Series
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, b := range rep.Backends {
			s := b.Samples["uncontended"]
			if len(s) == 0 {
				continue
			}
			var xs, ys []float64
			for _, p := range ps {
				y := log10us(pct(s, p))
				if !finite(y) {
					continue
				}
				xs, ys = append(xs, nines(p)), append(ys, y)
				lo, hi = min(lo, y), max(hi, y)
			}
			if len(xs) < 2 {
				continue
			}
			series = append(series, backendSeries(b.Backend, xs, ys))
		}
		if len(series) > 0 {
			svg, err := lineChart("percentile", decadeAxis("latency", lo, hi, usDecades), xticks, series)
			add("Uncontended acquire+release latency by percentile (all repeats)", svg, err)
		}
	}

	// 2. Contended throughput by client count (median over repeats).
	{
		var series []chart.Series
		lo, hi := math.Inf(1), math.Inf(-1)
		var xticks []chart.Tick
		for _, b := range rep.Backends {
			var xs, ys []float64
			for _, f := range b.Figures {
				var k int
				if _, err := fmt.Sscanf(f.Group, "contended k=%d", &k); err != nil || f.Name != "ops/s" || len(f.Runs) == 0 {
					continue
				}
				y := math.Log10(max(f.Stat.Median, 1))
				if !finite(y) {
					continue
				}
				xs, ys = append(xs, math.Log2(float64(k))), append(ys, y)
				lo, hi = min(lo, y), max(hi, y)
				if !slices.ContainsFunc(xticks, func(t chart.Tick) bool { return t.Value == xs[len(xs)-1] }) {
					xticks = append(xticks, chart.Tick{Value: xs[len(xs)-1], Label: fmt.Sprint(k)})
				}
			}
			if len(xs) >= 2 {
				series = append(series, backendSeries(b.Backend, xs, ys))
			}
		}
		slices.SortFunc(xticks, func(a, b chart.Tick) int { return cmp.Compare(a.Value, b.Value) })
		if len(series) > 0 {
			svg, err := lineChart("clients on one key", decadeAxis("acquisitions/s", lo, hi, numDecades), xticks, series)
			add("Contended throughput: acquire+release per second, one key", svg, err)
		}
	}

	// 3. Hand-off latency p50 by hold time.
	{
		var series []chart.Series
		lo, hi := math.Inf(1), math.Inf(-1)
		var xticks []chart.Tick
		for i, h := range handoffHolds {
			xticks = append(xticks, chart.Tick{Value: float64(i), Label: h.String()})
		}
		for _, b := range rep.Backends {
			var xs, ys []float64
			for i, h := range handoffHolds {
				f := b.get(row{Group: fmt.Sprintf("hand-off hold=%v", h), Name: "p50"})
				if f == nil || len(f.Runs) == 0 {
					continue
				}
				y := log10us(f.Stat.Median)
				if !finite(y) {
					continue
				}
				xs, ys = append(xs, float64(i)), append(ys, y)
				lo, hi = min(lo, y), max(hi, y)
			}
			if len(xs) >= 2 {
				series = append(series, backendSeries(b.Backend, xs, ys))
			}
		}
		if len(series) > 0 {
			svg, err := lineChart("holder's hold time", decadeAxis("release to next holder (p50)", lo, hi, usDecades), xticks, series)
			add("Hand-off latency: release → waiting client acquired (p50)", svg, err)
		}
	}

	// 4. Crash: time until the key is free again.
	{
		var bars []chart.Value
		top := 0.0
		for _, b := range rep.Backends {
			f := b.get(row{Group: "crash", Name: "free after"})
			if f == nil || len(f.Runs) == 0 || !finite(f.Stat.Median) {
				continue
			}
			c := backendColor(b.Backend)
			bars = append(bars, chart.Value{Label: b.Backend, Value: max(f.Stat.Median, 0),
				Style: chart.Style{FillColor: c, StrokeColor: c, StrokeWidth: 1}})
			top = max(top, f.Stat.Median)
		}
		if len(bars) >= 2 {
			ticks := secondTicks(top)
			bc := chart.BarChart{
				Width: chartWidth, Height: chartHeight, BarWidth: 50,
				Background: chart.Style{Padding: chart.Box{Top: 40, Left: 16, Right: 16, Bottom: 40}},
				// A range that is never empty: with every bar at 0 a
				// range 0..0 puts the ticks at 0/0 (see lineChart).
				YAxis: chart.YAxis{Name: "seconds", Ticks: ticks,
					Range: &chart.ContinuousRange{Min: 0, Max: ticks[len(ticks)-1].Value}},
				Bars: bars,
			}
			var buf bytes.Buffer
			err := bc.Render(chartFormat, &buf)
			add("Crashed holder: seconds until another client acquires (median)", template.HTML(stripXMLHeader(buf.String())), err)
		}
	}
	return out, nil
}

// secondTicks are round ticks from 0 to at least top (> 0 even when top is
// 0), about five of them.
func secondTicks(top float64) []chart.Tick {
	if !finite(top) || top <= 0 {
		top = 1
	}
	step := math.Pow(10, math.Floor(math.Log10(top/5)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if top/(step*m) <= 6 {
			step *= m
			break
		}
	}
	n := int(math.Ceil(top/step - 1e-9))
	var ticks []chart.Tick
	for i := 0; i <= n; i++ {
		v := math.Round(float64(i)*step*1e9) / 1e9 // 0.30000000000000004 → 0.3
		ticks = append(ticks, chart.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}
