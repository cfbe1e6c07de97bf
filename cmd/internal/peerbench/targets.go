package main

import (
	"fmt"
	"slices"
)

// target is one performance goal, a ratio of distlock to the peer in one
// cell of the benchmark.
type target struct {
	pair, scenario string
	p99            bool    // the p99 wait ratio (lower is better), not ops/s (higher is better)
	bound          float64 // ops/s ratio at least, p99 ratio at most
	why            string
}

// targets are the goals the backends are held to on a 2-core machine with
// the servers on the client's cores; "today's" figures are those the goals
// were set against.
var targets = []target{
	{"redis", "1key-hold5ms", true, 0.5, "fair hand-off: p99 wait at most half the peer's"},
	{"redis", "1key-hold5ms", false, 0.95, "fair hand-off at the peer's rate"},
	{"redis", "uncontended", false, 0.96, "no slower than the racing default was"},
	{"redis", "8keys", false, 0.70, "no slower than the racing default was"},
	{"etcd", "8keys", false, 0.90, "independent keys level with the Mutex"},
	{"etcd", "uncontended", false, 0.95, "level with the Mutex"},
	{"redlock", "uncontended", false, 0.60, "no regression"},
	{"redlock", "8keys", false, 0.60, "no regression"},
	{"redlock", "1key-hold5ms", false, 0.71, "no regression"},
	{"zk", "uncontended", false, 1.10, "no regression"},
	{"zk", "8keys", false, 0.95, "no regression"},
	{"zk", "1key-hold5ms", false, 0.94, "no regression"},
	{"postgres", "uncontended", false, 1.0, "at least level with pglock"},
	{"postgres", "8keys", false, 1.0, "at least level with pglock"},
	{"postgres", "1key-hold5ms", true, 0.5, "hand-off p99 at most half pglock's"},
}

// targetRows is the table of the targets whose cell this run measured.
func targetRows(rep *Report) [][]string {
	rows := [][]string{{"pair", "scenario", "figure", "goal", "target", "measured", ""}}
	for _, t := range targets {
		i := slices.IndexFunc(rep.Cells, func(c *Cell) bool { return c.Pair == t.pair && c.Scenario == t.scenario })
		if i < 0 {
			continue
		}
		c := rep.Cells[i]
		figure, got, want, met := "ops/s", c.OpsRatio, "≥ ", c.OpsRatio >= t.bound
		if t.p99 {
			figure, got, want, met = "p99 wait", c.WaitP99Ratio, "≤ ", c.WaitP99Ratio <= t.bound
		}
		verdict := "met"
		if !met {
			verdict = "MISSED"
		}
		rows = append(rows, []string{t.pair, scenarioByID(t.scenario).title, figure, t.why,
			fmt.Sprintf("%s%.2f×", want, t.bound), fmt.Sprintf("%.2f×", got), verdict})
	}
	return rows
}
