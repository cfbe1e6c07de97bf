package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/internal/faults/history"
)

// TestObserveRule: an observer's leaders must come in term order within
// one Observe stream, and each must be a real term: a granted token with
// its candidate's value, or a token nobody logged (an ambiguous grant)
// naming a candidate that had begun campaigning.
func TestObserveRule(t *testing.T) {
	s := int64(time.Second)
	c0, c1 := history.CandidateValue(0), history.CandidateValue(1)
	candidates := [][]Event{
		{{Worker: 0, Ev: "acquire", Token: 10, T0: 1 * s, T: 1 * s, Leader: c0}, {Worker: 0, Ev: "release", Token: 10, T0: 2 * s, T: 2 * s}},
		{{Worker: 1, Ev: "acquire", Token: 12, T0: 1 * s, T: 2 * s, Leader: c1}, {Worker: 1, Ev: "release", Token: 12, T0: 3 * s, T: 3 * s}},
	}
	obs := func(es ...Event) int {
		for i := range es {
			es[i].Worker = 2
		}
		var n int
		observed(append(candidates, es), func(rule, format string, args ...any) {
			if rule != RuleObserve {
				t.Errorf("rule %s", rule)
			}
			n++
		})
		return n
	}
	o := func(tok int64, v string, at int64) Event { return Event{Ev: "observe", Token: tok, Leader: v, T: at} }
	start := Event{Ev: "observe-start"}
	for _, c := range []struct {
		name string
		evs  []Event
		want int
	}{
		{"both terms, in order", []Event{start, o(10, c0, s), o(12, c1, 2*s)}, 0},
		{"an ambiguous grant of a candidate campaigning", []Event{start, o(10, c0, s), o(11, c1, 2*s), o(12, c1, 2*s)}, 0},
		{"out of term order", []Event{start, o(12, c1, 2*s), o(10, c0, 2*s)}, 1},
		{"a repeat", []Event{start, o(10, c0, s), o(10, c0, s)}, 1},
		{"a new stream starts over", []Event{start, o(12, c1, 2*s), start, o(10, c0, 2*s)}, 0},
		{"a term with another candidate's value", []Event{start, o(10, c1, s)}, 1},
		{"a term seen before its campaign began", []Event{start, o(12, c1, s/2)}, 1},
		{"a token nobody was granted, of a candidate not campaigning", []Event{start, o(11, history.CandidateValue(5), 2*s)}, 1},
	} {
		if n := obs(c.evs...); n != c.want {
			t.Errorf("%s: %d breaks, want %d", c.name, n, c.want)
		}
	}
	st := electionStats(append(candidates, []Event{start, o(10, c0, s), o(11, c1, 2*s), {Ev: "abandon", Token: 12}}))
	if st.Terms != 2 || st.Resigned != 2 || st.Observed != 2 || st.Unmatched != 1 || st.Abandoned != 1 {
		t.Errorf("stats %v", st)
	}
}

// TestStepString: each kind names its target: a delay-link step its worker
// and server, not "server N".
func TestStepString(t *testing.T) {
	for _, c := range []struct {
		st   Step
		want string
	}{
		{Step{Kind: KDelayLink, Target: 1, Server: 2, Param: 100 * time.Millisecond}, "worker 1→server 2, 100ms each way"},
		{Step{Kind: KDropReplies, Target: 0}, "worker 0 (replies)"},
		{Step{Kind: KDropAll, Target: -1}, "every worker (replies)"},
		{Step{Kind: KKillRestart, Target: 2}, "server 2"},
		{Step{Kind: KClockJump, Target: 1}, "server 1"},
		{Step{Kind: KPauseHolder, Target: -1}, "holder"},
	} {
		if s := c.st.String(); !strings.Contains(s, c.want) {
			t.Errorf("%s: %q lacks %q", c.st.Kind, s, c.want)
		}
	}
}
