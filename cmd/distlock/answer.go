package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

// quorumNodes is the smallest usual cluster of each backend whose tolerance
// grows with its node count ((n-1)/2 in its Guarantees): the answer states
// the backend's tolerance for that size, not for a one-node test server.
var quorumNodes = map[string]int{"etcd": 3, "zookeeper": 3, "redlock": 5}

// answer is the report's opening line for one backend.
type answer struct {
	Backend, Survives, Costs, Use string
}

// answers sums up each backend: what it survives (declared guarantees and
// fault rows), what it costs (its figures against the others'), when to use it.
func answers(rep *Report) []answer {
	var out []answer
	for _, b := range rep.Backends {
		out = append(out, answer{
			Backend:  b.Backend,
			Survives: survives(b),
			Costs:    costs(rep, b),
			Use:      useWhen(b),
		})
	}
	return out
}

// nodesIn counts the servers in a backend URL (comma-separated hosts).
func nodesIn(raw string) int {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return 1
	}
	return strings.Count(u.Host, ",") + 1
}

func survives(b *BackendResult) string {
	g := b.Guarantees
	if g.SingleProcess {
		return "nothing outside its process: locks exist in one process only"
	}
	var parts []string
	if n, ok := quorumNodes[g.Backend]; ok {
		here := nodesIn(b.URL)
		n = max(n, here)
		parts = append(parts, fmt.Sprintf("a minority of members failing (%d members tolerate %d)", n, (n-1)/2))
		if here != n {
			parts = append(parts, fmt.Sprintf("in this run: %d %s, tolerates %d", here, plural(here, "node"), g.FailuresTolerated))
		}
	} else {
		parts = append(parts, "no server loss (one server)")
	}
	if g.RestartLosesLocks {
		parts = append(parts, "a crash, restart or failover of a server can drop held locks")
	}
	if g.ClockDependent {
		parts = append(parts, "assumes bounded clock drift")
	}
	if s := faultSummary(b.FaultRows); s != "" {
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// faultSummary says under which faults the fenced (guarded) writes stayed
// correct in the fault matrix, and which of its cells failed.
func faultSummary(rows []matrixfile.Row) string {
	var held, failed []string
	for _, r := range rows {
		switch {
		case r.Failed:
			failed = append(failed, r.Fault+" "+r.Mode)
		case r.Mode == "guarded" && expectation(r) == "":
			held = append(held, r.Fault)
		}
	}
	slices.Sort(held)
	held = slices.Compact(held)
	var parts []string
	if len(held) > 0 {
		parts = append(parts, "fenced writes correct under "+strings.Join(held, ", "))
	}
	if len(failed) > 0 {
		parts = append(parts, "FAILED: "+strings.Join(failed, ", "))
	}
	return strings.Join(parts, "; ")
}

// answerFigures are the figures the answer compares, as named there.
var answerFigures = []struct {
	r    row
	name string
}{
	{row{Group: "uncontended", Name: "p50"}, "uncontended p50"},
	{row{Group: "hand-off hold=0s", Name: "p99"}, "hand-off p99"},
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// costs gives b's headline latencies and where they rank among the backends.
func costs(rep *Report, b *BackendResult) string {
	var parts []string
	for _, af := range answerFigures {
		f := b.get(af.r)
		if f == nil || len(f.Runs) == 0 {
			continue
		}
		rank, n := 1, 0
		for _, o := range rep.Backends {
			if of := o.get(af.r); of != nil && len(of.Runs) > 0 {
				n++
				if of.Stat.Median < f.Stat.Median {
					rank++
				}
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s %s (%s of %d)", af.name, num(f.Stat.Median), f.Unit, ordinal(rank), n))
	}
	if len(parts) == 0 {
		return "not measured"
	}
	return strings.Join(parts, ", ")
}

func ordinal(n int) string {
	switch {
	case n == 1:
		return "fastest"
	case n%10 == 2 && n%100 != 12:
		return fmt.Sprintf("%dnd", n)
	case n%10 == 3 && n%100 != 13:
		return fmt.Sprintf("%drd", n)
	}
	return fmt.Sprintf("%dth", n)
}

// useFor is when to pick each known backend, a fixed sentence per backend.
var useFor = map[string]string{
	"memory":    "every locker lives in one process, e.g. tests",
	"redis":     "you run Redis and want the lowest latency (efficiency locks, or fence writes)",
	"redlock":   "you run several independent Redis nodes and want to ride out a minority failing; fence writes",
	"etcd":      "a lock must stay correct through a member failing (e.g. you run Kubernetes)",
	"zookeeper": "you already run ZooKeeper and want first-come, first-served waiters",
	"postgres":  "you already run PostgreSQL: the lock and its fence live beside your data",
}

// useWhen is the advice for b: its fixed sentence, or for a backend not
// listed in useFor one that follows from its declared guarantees.
func useWhen(b *BackendResult) string {
	if s, ok := useFor[b.Guarantees.Backend]; ok {
		return s
	}
	g := b.Guarantees
	switch {
	case g.SingleProcess:
		return "every locker lives in one process, e.g. tests"
	case g.FailuresTolerated > 0:
		return "a lock must stay correct through a node failing"
	case g.RestartLosesLocks:
		return "a rare double run is harmless, or you fence writes"
	default:
		return "the data the lock guards lives in this server (fence with its token)"
	}
}

// expectation labels a fault row whose violations are the point of the
// cell rather than a failure: the unguarded run under a paused holder is
// the negative control that must show them, and a fault past what the
// deployment declares it tolerates is allowed to break it. "" otherwise,
// and always for a row whose assertions failed.
func expectation(r matrixfile.Row) string {
	if r.Failed {
		return ""
	}
	switch {
	case r.Fault == "pause-holder" && r.Mode == "unguarded":
		return "expected: negative control"
	case r.Fault == "kill-restart-server" && r.RestartLosesLocks,
		strings.HasPrefix(r.Fault, "lose-") && r.FailuresTolerated == 0,
		strings.Contains(r.Fault, "majority"):
		return "beyond declared tolerance"
	}
	return ""
}
