package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestAllPairsShort runs the program's whole path (servers, every pair,
// every scenario, both sides, the report) for 200 ms a run, one run: it
// checks that each side does work, not how fast.
func TestAllPairsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 9 servers and measures 5 pairs; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	c := config{duration: 200 * time.Millisecond, runs: 1, retry: "linear:5ms", dir: t.TempDir(), progress: &progress,
		observeHold: span{0, 5 * time.Millisecond}, observeBackoff: span{time.Millisecond, 50 * time.Millisecond}}
	rep, err := benchmark(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range rep.Notes {
		if os.Getenv("CI") == "true" {
			t.Errorf("%s", n)
		} else {
			t.Log(n)
		}
	}
	for _, e := range rep.Errors {
		t.Errorf("%s", e)
	}
	if len(rep.Cells) == 0 {
		t.Skip("no pair measured (servers missing): " + strings.Join(rep.Notes, "; "))
	}
	if want := (len(pairs) - len(rep.Notes)) * len(scenarios); len(rep.Cells) != want {
		t.Errorf("%d cells, want %d", len(rep.Cells), want)
	}
	for _, cl := range rep.Cells {
		for _, s := range []struct {
			name string
			runs []measurement
			sum  summary
		}{{"distlock", cl.Distlock, cl.DL}, {"peer", cl.Peer, cl.PR}} {
			if len(s.runs) != 1 || s.runs[0].Ops == 0 || s.sum.OpsPerSec <= 0 || s.sum.WaitP99Ms <= 0 {
				t.Errorf("%s, %s, %s: no work measured: %+v", cl.Title, cl.ScTitle, s.name, s.runs)
			}
			if cl.Scenario == "uncontended" && s.sum.AllocsPerOp <= 0 {
				t.Errorf("%s, %s: no allocations counted", cl.Title, s.name)
			}
		}
		if cl.OpsRatio <= 0 || cl.WaitP99Ratio <= 0 {
			t.Errorf("%s, %s: ratios %v, %v", cl.Title, cl.ScTitle, cl.OpsRatio, cl.WaitP99Ratio)
		}
	}
	wantObserve := 0
	for _, p := range pairs {
		if _, ok := rep.Machine.Servers[p.id]; ok {
			wantObserve += len(electSides(p, c.observeBackoff))
		}
	}
	if len(rep.Observe) != wantObserve {
		t.Errorf("%d observer-latency rows, want %d", len(rep.Observe), wantObserve)
	}
	for _, cl := range rep.Observe {
		// Every leader holds until the observer has seen it: none may be
		// missed, and none takes seconds.
		if len(cl.Runs) != 1 || cl.Changes < 20 || cl.Missed != 0 || cl.ElectedP99Ms <= 0 || cl.ElectedP99Ms > 2000 ||
			cl.HandoverP50Ms < cl.ElectedP50Ms {
			t.Errorf("%s, %s: %+v", cl.Backend, cl.Side, cl)
		}
	}
	var out bytes.Buffer
	printReport(&out, rep)
	t.Log("\n" + out.String())
}

// TestReportFromSyntheticRuns checks the medians, ratios and both tables
// on made-up figures.
func TestReportFromSyntheticRuns(t *testing.T) {
	cl := &Cell{Pair: "redis", Title: "redis vs bsm/redislock", Scenario: "1key-hold5ms", ScTitle: scenarios[2].title,
		Distlock: []measurement{{OpsPerSec: 100, WaitP99Ms: 40}, {OpsPerSec: 300, WaitP99Ms: 10}, {OpsPerSec: 200, WaitP99Ms: 20}},
		Peer:     []measurement{{OpsPerSec: 400, WaitP99Ms: 80}, {OpsPerSec: 800, WaitP99Ms: 80}, {OpsPerSec: 0, WaitP99Ms: 80}}}
	cl.summarize()
	if cl.DL.OpsPerSec != 200 || cl.PR.OpsPerSec != 400 || cl.OpsRatio != 0.5 {
		t.Errorf("ops: distlock %v, peer %v, ratio %v; want 200, 400, 0.5", cl.DL.OpsPerSec, cl.PR.OpsPerSec, cl.OpsRatio)
	}
	if cl.WaitP99Ratio != 0.25 {
		t.Errorf("p99 wait ratio %v, want 0.25", cl.WaitP99Ratio)
	}
	un := &Cell{Pair: "zk", Title: "zookeeper vs zk.Lock", Scenario: "uncontended", ScTitle: scenarios[0].title,
		Distlock: []measurement{{OpsPerSec: 150, WaitP99Ms: 9, AllocsPerOp: 107, BytesPerOp: 6302}, {OpsPerSec: 250, WaitP99Ms: 11, AllocsPerOp: 109}},
		Peer:     []measurement{{OpsPerSec: 100, WaitP99Ms: 5, AllocsPerOp: 56}, {OpsPerSec: 100, WaitP99Ms: 5, AllocsPerOp: 56}}}
	un.summarize()
	if un.DL.OpsPerSec != 200 || un.OpsRatio != 2 || un.DL.AllocsPerOp != 108 {
		t.Errorf("even runs: ops %v ratio %v allocs %v; want 200, 2, 108", un.DL.OpsPerSec, un.OpsRatio, un.DL.AllocsPerOp)
	}
	msd := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	// Percentiles over the runs' changes together, not medians of runs.
	ob := &ObserveCell{Pair: "etcd", Backend: "etcd", Side: "etcd concurrency.Election", Reference: true, Runs: []observeRun{
		{Changes: 3, ObserverFirst: 1, elected: msd(-1, 2, 3), hando: msd(5, 6, 7), elect: msd(6, 4, 4)},
		{Changes: 2, Missed: 1, elected: msd(40, 50), hando: msd(60, 70), elect: msd(20, 20)}}}
	ob.summarize()
	if ob.Changes != 5 || ob.Missed != 1 || ob.ObserverFirst != 1 || ob.ElectedP50Ms != 3 || ob.ElectedP99Ms != 50 || ob.HandoverP50Ms != 7 ||
		ob.ElectP50Ms != 6 || ob.ElectP99Ms != 20 {
		t.Errorf("observe summary %+v", ob)
	}
	rep := &Report{Machine: Machine{CPU: "Test CPU", Cores: 2, GoVersion: "go1.x"}, Duration: "1s", Runs: 3,
		Cells: []*Cell{cl, un}, Notes: []string{"etcd vs concurrency.Mutex not measured: x"},
		Observe: []*ObserveCell{ob}, ObserveMethod: "observer latency: test"}
	var out bytes.Buffer
	printReport(&out, rep)
	got := out.String()
	for _, want := range []string{
		"machine: Test CPU, 2 cores",
		"| scenario | redis vs bsm/redislock | zookeeper vs zk.Lock |",
		"| uncontended (1 worker, 1 key) ops/s | – | 2.00× |",
		"| 8 workers, 1 key, 5 ms hold: ops/s, p99 wait | 0.50×, 0.25× | – |",
		"zookeeper vs zk.Lock                 108",
		"note: etcd vs concurrency.Mutex not measured",
		"observer latency: test",
		"etcd     etcd concurrency.Election (reference)                     3.00   50.00                    7.00   70.00                   6.00   20.00        5       1               1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if ratio(1, 0) != 0 {
		t.Error("ratio over zero should be 0")
	}
}

func TestPercentile(t *testing.T) {
	var xs []time.Duration
	for i := 1; i <= 100; i++ {
		xs = append(xs, time.Duration(i))
	}
	if p := percentile(xs, 99); p != 99 {
		t.Errorf("p99 of 1..100 = %v, want 99", p)
	}
	if p := percentile(xs, 50); p != 50 {
		t.Errorf("p50 of 1..100 = %v, want 50", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("p99 of none = %v", p)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"--only", "nope"}, {"--runs", "0"}, {"--duration", "0s"}, {"--redislock-retry", "exp:5ms"},
		{"--scenarios", "nope"}, {"--observe-hold", "-1s:1s"}, {"--observe-hold", "2s:1s"}, {"--observe-backoff", "50ms"}, {"--observe-backoff", "9ms:1ms"}} {
		var stderr bytes.Buffer
		if code := run(args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
	c := config{duration: time.Second, runs: 1, retry: "exp:16ms:512ms", only: []string{"ZooKeeper", " redis"},
		scens: []string{" Observe", "8keys"}, observeBackoffFlag: "2ms:40ms", observeHoldFlag: "0s:5ms"}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	if !c.wantsScenario(observeID) || !c.wantsScenario("8keys") || c.wantsScenario("uncontended") {
		t.Errorf("--scenarios %v: wants observe and 8keys, not uncontended", c.scens)
	}
	if c.observeBackoff != (span{2 * time.Millisecond, 40 * time.Millisecond}) || c.observeHold != (span{0, 5 * time.Millisecond}) {
		t.Errorf("--observe-backoff 2ms:40ms, --observe-hold 0s:5ms: %+v, %+v", c.observeBackoff, c.observeHold)
	}
	c.observeBackoffFlag = "none"
	if err := c.check(); err != nil || c.observeBackoff != (span{}) {
		t.Errorf("--observe-backoff none: %+v, %v", c.observeBackoff, err)
	}
	if !c.wants("zk") || !c.wants("redis") || c.wants("etcd") {
		t.Errorf("--only %v: wants zk, redis and not etcd", c.only)
	}
}
