package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

// TestAnswersStateBackendNotDeployment: the etcd answer gives the tolerance
// of a 3-node cluster and labels the one-node run's 0 as such.
func TestAnswersStateBackendNotDeployment(t *testing.T) {
	rep := reportFixture(t)
	got := map[string]answer{}
	for _, a := range answers(rep) {
		got[a.Backend] = a
	}
	if len(got) != len(rep.Backends) {
		t.Fatalf("%d answers for %d backends", len(got), len(rep.Backends))
	}
	for be, want := range map[string]string{
		"etcd":    "a minority of members failing (3 members tolerate 1); in this run: 1 node, tolerates 0",
		"redlock": "a minority of members failing (5 members tolerate 2)",
		"memory":  "nothing outside its process",
		"redis":   "no server loss (one server)",
	} {
		if !strings.Contains(got[be].Survives, want) {
			t.Errorf("%s survives %q, want it to contain %q", be, got[be].Survives, want)
		}
	}
	if strings.Contains(got["redlock"].Survives, "in this run") {
		t.Errorf("redlock ran on 5 nodes, yet: %q", got["redlock"].Survives)
	}
	if !regexp.MustCompile(`uncontended p50 [0-9.]+ ms .*hand-off p99 [0-9.]+ ms`).MatchString(got["redis"].Costs) {
		t.Errorf("redis costs %q: want its uncontended p50 and hand-off p99", got["redis"].Costs)
	}
	if !strings.Contains(got["redis"].Use, "lowest latency") {
		t.Errorf("redis use %q: want its fixed sentence", got["redis"].Use)
	}
	if !strings.Contains(got["memory"].Costs, "uncontended p50") || !strings.Contains(got["memory"].Costs, "fastest of 5") {
		t.Errorf("memory costs %q: want the fastest uncontended p50 of 5", got["memory"].Costs)
	}
}

func TestExpectation(t *testing.T) {
	for _, c := range []struct {
		r    matrixfile.Row
		want string
	}{
		{matrixfile.Row{Fault: "pause-holder", Mode: "unguarded", Linearizable: "illegal"}, "expected: negative control"},
		{matrixfile.Row{Fault: "pause-holder", Mode: "guarded"}, ""},
		{matrixfile.Row{Fault: "pause-holder", Mode: "unguarded", Failed: true}, ""},
		{matrixfile.Row{Fault: "kill-restart-server", Mode: "unguarded", RestartLosesLocks: true}, "beyond declared tolerance"},
		{matrixfile.Row{Fault: "kill-restart-server", Mode: "unguarded"}, ""},
		{matrixfile.Row{Fault: "lose-minority", Mode: "unguarded", FailuresTolerated: 1}, ""},
	} {
		if got := expectation(c.r); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}

// TestReportHTMLAnswerFirst: the answer, then the charts, come before the
// environment and the guarantees' notes; the negative control's "illegal"
// is not styled as an error, a failed cell is.
func TestReportHTMLAnswerFirst(t *testing.T) {
	rep := reportFixture(t)
	var h bytes.Buffer
	if err := writeHTML(&h, rep); err != nil {
		t.Fatal(err)
	}
	html := h.String()
	order := []string{`id="answer"`, `class="charts"`, `Notes on each backend`, `id="environment"`}
	last := -1
	for _, s := range order {
		i := strings.Index(html, s)
		if i < 0 || i < last {
			t.Fatalf("%q at %d, want it after %d (order %q)", s, i, last, order)
		}
		last = i
	}
	if regexp.MustCompile(`class="err">illegal<`).MatchString(html) {
		t.Error(`the negative control's "illegal" is styled as an error`)
	}
	if !strings.Contains(html, `class="exp">expected: negative control<`) {
		t.Error("no neutral \"expected: negative control\" cell")
	}
	if !strings.Contains(html, `class="err">FAIL`) {
		t.Error("the failed cell of the fixture is not red")
	}
}
