package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/distlock/distlock/cmd/internal/faults/history"
)

// Event is one line of a worker's log (see package history).
type Event = history.Event

// readLog parses one worker's log. A torn last line (the worker was killed
// mid-write) is ignored.
func readLog(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		evs = append(evs, e)
	}
	return evs, sc.Err()
}

// interval is the time a worker believed it held the lock: from Acquire's
// return until it called Release or learned of the loss (Lease.Done),
// whichever came first. A paused holder keeps believing through the pause.
type interval struct {
	worker     int
	token      int64
	start, end int64
	ended      string // what ended the belief: the loss notice, a release, the last word of a killed worker
}

// Check is the verdict on one scenario's history.
type Check struct {
	Acquires int // leases granted
	Writes   int // writes attempted
	Accepted int // writes committed (acknowledged increments)
	Rejected int // writes refused by the fence
	// LegitRejected are the refused writes whose lease still stood by its
	// own account (not ended by Done/Err, deadline not passed) when the
	// refusal came back: legitimate writes rejected, a liveness failure.
	// A refusal after the lease ended is the fence doing its job.
	LegitRejected int
	Uncertain     int // writes whose outcome is unknown (an error other than the fence)
	AcquireErrs   int // failed Acquire calls (10 s bound each), e.g. while a server is down
	Overlaps      int // pairs of leases on the key whose belief intervals intersect
	// OverlapDetail describes the first overlapping pair ("" for none):
	// how long the earlier belief outlived the later grant, what ended it,
	// and how long its worker's process stalled meanwhile (a loaded host
	// makes a loss notice late; a stall past a backend's margin is beyond
	// any notice).
	OverlapDetail string
	Final         int64
	LostUpdates   int64 // acknowledged increments missing from the final counter
	StaleAccepts  int   // accepted writes whose fence (epoch, token) is below one committed before they began, or equal to one another holder committed
	// Linearizable is porcupine's verdict on the accepted read-modify-writes
	// seen as atomic increments of one counter (plus the final read):
	// "ok", "illegal" or "unknown" (checker timed out).
	Linearizable string
}

// check runs every checker over the workers' events and the final counter.
func check(evs [][]Event, final int64, lastT int64) Check {
	var c Check
	var ivs []interval
	var writes []Event
	for _, wevs := range evs {
		open := -1 // index in ivs of the worker's open interval
		closeAt := func(t int64, why string) {
			if open >= 0 {
				ivs[open].end, ivs[open].ended = t, why
				open = -1
			}
		}
		for _, e := range wevs {
			switch e.Ev {
			case "acquire":
				closeAt(e.T0, "the next acquire") // cannot happen: one lease at a time
				c.Acquires++
				ivs = append(ivs, interval{worker: e.Worker, token: e.Token, start: e.T, end: math.MaxInt64})
				open = len(ivs) - 1
			case "lost":
				if open >= 0 && ivs[open].token == e.Token {
					closeAt(e.T, "its loss notice")
				}
			case "release":
				if open >= 0 && ivs[open].token == e.Token {
					closeAt(e.T0, "its release")
				}
			case "error":
				c.AcquireErrs++
			case "write":
				c.Writes++
				writes = append(writes, e)
				switch e.Result {
				case "ok":
					c.Accepted++
				case "stale":
					c.Rejected++
					if e.Valid {
						c.LegitRejected++
					}
				default:
					c.Uncertain++
				}
			}
		}
		if open >= 0 && len(wevs) > 0 {
			closeAt(wevs[len(wevs)-1].T, "the worker's last word") // killed while holding: believed until then
		}
	}
	c.Overlaps = overlaps(ivs)
	if c.Overlaps > 0 {
		c.OverlapDetail = describeOverlap(ivs, stallsOf(evs))
	}
	c.Final = final
	if lost := int64(c.Accepted) - final; lost > 0 {
		c.LostUpdates = lost
	}
	c.StaleAccepts = staleAccepts(writes)
	c.Linearizable = linearizable(writes, final, lastT)
	return c
}

// overlaps counts pairs of intervals that intersect.
func overlaps(ivs []interval) int {
	ivs = slices.Clone(ivs)
	slices.SortFunc(ivs, func(a, b interval) int { return cmpInt(a.start, b.start) })
	n := 0
	var active []int64 // ends of earlier intervals
	for _, iv := range ivs {
		kept := active[:0]
		for _, end := range active {
			if end > iv.start {
				kept = append(kept, end)
			}
		}
		active = kept
		n += len(active)
		active = append(active, iv.end)
	}
	return n
}

// describeOverlap names the first pair of intersecting intervals (by the
// later one's start): the belief that outlived another's grant, by how
// much, what ended it, and the stalls of its worker's process during it.
func describeOverlap(ivs []interval, stalls map[int][]span) string {
	ivs = slices.Clone(ivs)
	slices.SortFunc(ivs, func(a, b interval) int { return cmpInt(a.start, b.start) })
	for j, b := range ivs {
		for _, a := range ivs[:j] {
			if a.end <= b.start {
				continue
			}
			stalled := time.Duration(overlap(union(stalls[a.worker], 0), a.start, a.end))
			return fmt.Sprintf("worker %d (token %d) believed it held for %v after worker %d (token %d) was granted, until %s; worker %d's process stalled %v in all while it believed",
				a.worker, a.token, time.Duration(a.end-b.start).Round(time.Millisecond), b.worker, b.token, a.ended,
				a.worker, stalled.Round(time.Millisecond))
		}
	}
	return ""
}

// staleAccepts counts accepted writes whose fence (epoch, then token; see
// fenceKey) is below that of an accepted write that had committed before
// they wrote (before their UPDATE was sent, so surely before their commit),
// or equal to it from another holder (a repeated token): the writes a fence
// exists to refuse. Writes whose order is not certain are not compared.
func staleAccepts(writes []Event) int {
	var ok []Event
	for _, w := range writes {
		if w.Result == "ok" {
			ok = append(ok, w)
		}
	}
	slices.SortFunc(ok, func(a, b Event) int { return cmpInt(a.T, b.T) })
	maxFence := make([]fenceKey, len(ok)) // the largest fence among ok[:i+1]
	for i, w := range ok {
		maxFence[i] = fenceOf(w)
		if i > 0 && maxFence[i].less(maxFence[i-1]) {
			maxFence[i] = maxFence[i-1]
		}
	}
	// The holders that committed each fence, with when they first did.
	type first struct {
		holder string
		t      int64
	}
	byFence := map[fenceKey][]first{}
	for _, w := range ok {
		k := fenceOf(w)
		if w.Holder == "" || slices.ContainsFunc(byFence[k], func(f first) bool { return f.holder == w.Holder }) {
			continue
		}
		byFence[k] = append(byFence[k], first{w.Holder, w.T})
	}
	n := 0
	for _, w := range ok {
		// writes committed strictly before w wrote
		i := sort.Search(len(ok), func(i int) bool { return ok[i].T >= w.TW })
		switch {
		case i > 0 && fenceOf(w).less(maxFence[i-1]):
			n++
		case w.Holder != "" && slices.ContainsFunc(byFence[fenceOf(w)], func(f first) bool { return f.holder != w.Holder && f.t < w.TW }):
			n++
		}
	}
	return n
}

type incr struct{ read, wrote int64 }

// counterModel: each accepted read-modify-write is an atomic increment that
// must read the current value; the final read must see the last one. A write
// with an unknown outcome may or may not have happened.
var counterModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{int64(0)} },
	Step: func(state, input, output any) []any {
		s := state.(int64)
		switch in := input.(type) {
		case string: // "read"
			if output.(int64) == s {
				return []any{s}
			}
			return nil
		case incr: // accepted
			if in.read == s {
				return []any{in.wrote}
			}
			return nil
		case *incr: // uncertain: applied or not
			if in.read == s {
				return []any{s, in.wrote}
			}
			return []any{s}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string { return fmt.Sprint(input, " -> ", output) },
}

var counterModelD = counterModel.ToModel()

// linearizable checks the writes against counterModel with porcupine. The
// reads of rejected writes are left out: their transactions rolled back.
func linearizable(writes []Event, final, lastT int64) string {
	var ops []porcupine.Operation
	for _, w := range writes {
		switch w.Result {
		case "ok":
			ops = append(ops, porcupine.Operation{ClientId: w.Worker, Input: incr{w.Read, w.Value}, Call: w.T0, Output: w.Value, Return: w.T})
		case "error":
			if w.Value == 0 {
				continue // failed before writing
			}
			ops = append(ops, porcupine.Operation{ClientId: w.Worker, Input: &incr{w.Read, w.Value}, Call: w.T0, Output: w.Value, Return: lastT})
		}
	}
	ops = append(ops, porcupine.Operation{ClientId: -1, Input: "read", Call: lastT + 1, Output: final, Return: lastT + 2})
	switch porcupine.CheckOperationsTimeout(counterModelD, ops, 20*time.Second) {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "illegal"
	default:
		return "unknown"
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
