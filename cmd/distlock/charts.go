package main

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strings"

	chart "github.com/wcharczuk/go-chart/v2"
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

// lineChart renders series (one per backend) sharing an x axis.
func lineChart(xName string, y chart.YAxis, xTicks []chart.Tick, series []chart.Series) (template.HTML, error) {
	g := chart.Chart{
		Width: 560, Height: 360,
		Background: chart.Style{Padding: chart.Box{Top: 24, Left: 12, Right: 12, Bottom: 12}},
		XAxis:      chart.XAxis{Name: xName, Ticks: xTicks},
		YAxis:      y,
		Series:     series,
	}
	g.Elements = []chart.Renderable{chart.LegendLeft(&g)}
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
		var xs []float64
		for _, p := range ps {
			xs = append(xs, nines(p))
		}
		xticks := []chart.Tick{{Value: 0, Label: "p0"}, {Value: nines(50), Label: "p50"}, {Value: 1, Label: "p90"}, {Value: 2, Label: "p99"}, {Value: 3, Label: "p99.9"}}
		var series []chart.Series
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, b := range rep.Backends {
			s := b.Samples["uncontended"]
			if len(s) == 0 {
				continue
			}
			var ys []float64
			for _, p := range ps {
				y := log10us(pct(s, p))
				ys = append(ys, y)
				lo, hi = min(lo, y), max(hi, y)
			}
			series = append(series, chart.ContinuousSeries{Name: b.Backend, XValues: xs, YValues: ys})
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
				xs = append(xs, math.Log2(float64(k)))
				y := math.Log10(max(f.Stat.Median, 1))
				ys = append(ys, y)
				lo, hi = min(lo, y), max(hi, y)
				if !slices.ContainsFunc(xticks, func(t chart.Tick) bool { return t.Value == xs[len(xs)-1] }) {
					xticks = append(xticks, chart.Tick{Value: xs[len(xs)-1], Label: fmt.Sprint(k)})
				}
			}
			if len(xs) >= 2 {
				series = append(series, chart.ContinuousSeries{Name: b.Backend, XValues: xs, YValues: ys})
			}
		}
		slices.SortFunc(xticks, func(a, b chart.Tick) int { return int(a.Value - b.Value) })
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
				xs, ys = append(xs, float64(i)), append(ys, y)
				lo, hi = min(lo, y), max(hi, y)
			}
			if len(xs) >= 2 {
				series = append(series, chart.ContinuousSeries{Name: b.Backend, XValues: xs, YValues: ys})
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
			if f == nil || len(f.Runs) == 0 {
				continue
			}
			bars = append(bars, chart.Value{Label: b.Backend, Value: f.Stat.Median})
			top = max(top, f.Stat.Median)
		}
		if len(bars) >= 2 {
			bc := chart.BarChart{
				Width: 560, Height: 360, BarWidth: 50,
				Background: chart.Style{Padding: chart.Box{Top: 40}},
				YAxis:      chart.YAxis{Name: "seconds", Range: &chart.ContinuousRange{Min: 0, Max: top * 1.1}},
				Bars:       bars,
			}
			var buf bytes.Buffer
			err := bc.Render(chartFormat, &buf)
			add("Crashed holder: seconds until another client acquires (median)", template.HTML(stripXMLHeader(buf.String())), err)
		}
	}
	return out, nil
}
