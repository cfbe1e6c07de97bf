package faults

import (
	"fmt"

	"github.com/distlock/distlock/cmd/internal/faults/history"
)

// WorkloadElection is the election workload (RandomConfig.Workload): each worker
// is a candidate that campaigns for the role (package election) with a
// value naming itself, writes through its term's Fence while it leads,
// stops the moment the term's Done closes, resigns after a random time up
// to RandomConfig.Term and campaigns again; one more worker follows the
// leaders with election.Observe. Terms are logged as leases are, so rules
// (a)–(e) judge them; RuleObserve judges the observer.
const WorkloadElection = "election"

// RuleObserve is broken when the observer is told of leaders out of term
// order (within one Observe stream, each token must be above the last), or
// of a leader that was no real term: a token some candidate was granted,
// reported with another candidate's value, or reported before the
// candidate's Campaign began.
const RuleObserve = "f-observe"

// ElectionStats counts what the candidates and the observer did.
type ElectionStats struct {
	Terms     int // terms granted
	Resigned  int // terms ended by Resign
	Lost      int // terms ended by loss (Done closed with ErrLeaseLost)
	Abandoned int // writes rolled back because the term ended between their read and their UPDATE
	Observed  int // leaders the observer was told of
	// Unmatched are observed leaders whose token no candidate logged as
	// granted: a Campaign whose reply was lost (and given back), or one
	// cut short at the end of the run. Each must name a candidate that had
	// begun campaigning.
	Unmatched int
	// ObserveErr is the first error the observer's Observe returned ("" if
	// none): a backend that cannot inspect locks.
	ObserveErr string
}

// String is the stats as the row prints them.
func (s ElectionStats) String() string {
	return fmt.Sprintf("terms=%d resigned=%d lost=%d abandoned=%d observed=%d (unmatched %d)",
		s.Terms, s.Resigned, s.Lost, s.Abandoned, s.Observed, s.Unmatched)
}

// electionStats counts evs's terms, ends, abandoned writes and observations.
func electionStats(evs [][]Event) *ElectionStats {
	s := &ElectionStats{}
	for _, l := range leasesOf(evs) {
		s.Terms++
		if l.lost > 0 {
			s.Lost++
		} else if l.released > 0 {
			s.Resigned++
		}
	}
	granted := map[int64]bool{}
	for _, we := range evs {
		for _, e := range we {
			if e.Ev == "acquire" {
				granted[e.Token] = true
			}
		}
	}
	for _, we := range evs {
		for _, e := range we {
			switch e.Ev {
			case "abandon":
				s.Abandoned++
			case "observe-error":
				if s.ObserveErr == "" {
					s.ObserveErr = e.Err
				}
			case "observe":
				s.Observed++
				if !granted[e.Token] {
					s.Unmatched++
				}
			}
		}
	}
	return s
}

// observed checks RuleObserve on the observers' logs in evs (the workers
// with observe events): tokens strictly increase within each Observe
// stream; a token a candidate was granted is reported with that
// candidate's value, and not before its Campaign began; a token no
// candidate logged names a candidate that had begun campaigning by then.
func observed(evs [][]Event, add func(rule, format string, args ...any)) {
	type term struct {
		worker int
		value  string
		t0     int64
	}
	terms := map[int64][]term{}
	firstTry := map[string]int64{} // candidate value → its first attempt's start
	for _, we := range evs {
		for _, e := range we {
			if e.Ev == "acquire" {
				terms[e.Token] = append(terms[e.Token], term{e.Worker, e.Leader, e.T0})
			}
			if (e.Ev == "acquire" || e.Ev == "error" || e.Ev == "stopped") && e.T0 > 0 {
				v := history.CandidateValue(e.Worker)
				if t, ok := firstTry[v]; !ok || e.T0 < t {
					firstTry[v] = e.T0
				}
			}
		}
	}
	sec := func(t int64) string { return fmt.Sprintf("%.3fs", float64(t)/1e9) }
	for _, we := range evs {
		var last int64
		var lastAt int64
		for _, e := range we {
			switch e.Ev {
			case "observe-start":
				last = 0
				continue
			case "observe":
			default:
				continue
			}
			if last != 0 && e.Token <= last {
				add(RuleObserve, "observer w%d told of token %d (%q) at %s after token %d at %s: not in term order",
					e.Worker, e.Token, e.Leader, sec(e.T), last, sec(lastAt))
			}
			last, lastAt = e.Token, e.T
			ts := terms[e.Token]
			if len(ts) == 0 {
				if t, ok := firstTry[e.Leader]; !ok || t > e.T {
					add(RuleObserve, "observer w%d told at %s of token %d (%q), which no candidate was granted and no candidate of that value had begun campaigning for",
						e.Worker, sec(e.T), e.Token, e.Leader)
				}
				continue
			}
			var mine *term
			for i, t := range ts {
				if t.value == e.Leader {
					mine = &ts[i]
					if t.t0 <= e.T {
						break
					}
				}
			}
			switch {
			case mine == nil:
				add(RuleObserve, "observer w%d told at %s of token %d with value %q, but that term is w%d's (%q)",
					e.Worker, sec(e.T), e.Token, e.Leader, ts[0].worker, ts[0].value)
			case mine.t0 > e.T:
				add(RuleObserve, "observer w%d told at %s of token %d (%q), before w%d's Campaign for that term began at %s",
					e.Worker, sec(e.T), e.Token, e.Leader, mine.worker, sec(mine.t0))
			}
		}
	}
}
