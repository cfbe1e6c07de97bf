package faults

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// The rules the randomized harness checks. Each violation names one.
const (
	RuleMutex       = "a-mutual-exclusion" // two leases' [granted, locally-valid-until] intervals overlap
	RuleTokenOrder  = "b-token-order"      // a later holder's fence (epoch, token) is not above an earlier one's
	RuleStale       = "c-stale-accepted"   // the guard let a stale write through
	RuleLost        = "c-lost-update"      // an acknowledged guarded write is missing
	RuleLinear      = "c-linearizable"     // porcupine: the guarded register is not linearizable
	RuleLegit       = "d-legit-rejected"   // a guarded write refused while its lease stood
	RuleRecovery    = "d-recovery"         // after the faults healed, the key sat free while waiters waited
	RuleLeaseKept   = "d-lease-kept"       // a healthy holder lost its lease to a fault the backend tolerates
	RuleStranded    = "d-stranded"         // a healthy waiter blocked on a key no lease held, past the faults, for longer than the give-back bound
	RuleHang        = "d-hang"             // while a minority server hung, past hangGrace, the key sat free while waiters waited
	RuleLossNotice  = "e-loss-notice"      // a stale holder's Done closed too late after another holder's grant
	lossNoticeSlack = 300 * time.Millisecond
)

// Violation is one broken rule with the operations involved.
type Violation struct {
	Rule   string
	Detail string
}

// String names the rule broken and what broke it.
func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// leaseRec is one lease as the history shows it.
type leaseRec struct {
	worker           int
	fence            fenceKey
	t0, granted      int64 // Acquire called, returned
	released, lost   int64 // release called, Done seen closed by loss; 0 if not
	exp              int64 // local deadline at its end; 0 if unknown
	last             int64 // the worker's last event, for a lease never ended
	holder           string
	valid, doneUntil int64 // locally valid until; believed (not Done/released) until
}

func (l leaseRec) String() string {
	ms := func(t int64) string { return fmt.Sprintf("%.3fs", float64(t)/1e9) }
	return fmt.Sprintf("w%d %v [granted %s, valid until %s, Done/release %s]", l.worker, l.fence, ms(l.granted), ms(l.valid), ms(l.doneUntil))
}

func leasesOf(evs [][]Event) []leaseRec {
	var out []leaseRec
	for _, wevs := range evs {
		open := -1
		for _, e := range wevs {
			switch e.Ev {
			case "acquire":
				out = append(out, leaseRec{worker: e.Worker, fence: fenceOf(e), t0: e.T0, granted: e.T, holder: e.Holder})
				open = len(out) - 1
			case "lost":
				if open >= 0 && out[open].fence.token == e.Token && out[open].lost == 0 {
					out[open].lost, out[open].exp = e.T, e.Exp
				}
			case "release":
				if open >= 0 && out[open].fence.token == e.Token {
					out[open].released = e.T0
					if out[open].exp == 0 || (e.Exp != 0 && e.Exp < out[open].exp) {
						out[open].exp = e.Exp
					}
					open = -1
				}
			}
		}
		if len(wevs) > 0 {
			for i := range out {
				if out[i].worker == wevs[0].Worker {
					out[i].last = wevs[len(wevs)-1].T
				}
			}
		}
	}
	for i := range out {
		l := &out[i]
		l.doneUntil = int64(math.MaxInt64)
		if l.released > 0 {
			l.doneUntil = l.released
		}
		if l.lost > 0 && l.lost < l.doneUntil {
			l.doneUntil = l.lost
		}
		if l.doneUntil == math.MaxInt64 {
			l.doneUntil = l.last
		}
		l.valid = l.doneUntil
		if l.exp > 0 && l.exp < l.valid {
			l.valid = l.exp
		}
	}
	slices.SortFunc(out, func(a, b leaseRec) int { return cmpInt(a.granted, b.granted) })
	return out
}

// freeGaps reports each stretch of [from, to] longer than bound in which the
// key was free with no grant: the lease that ended it (nil: to came first).
// A lease holds the key until its local validity plus linger.
func freeGaps(ls []leaseRec, from, to int64, linger, bound time.Duration, report func(gap time.Duration, next *leaseRec)) {
	for _, l := range ls {
		if l.valid > from && l.granted <= from {
			from = l.valid + int64(linger)
		}
	}
	for i := range ls {
		l := &ls[i]
		if l.granted > to {
			break
		}
		if l.granted >= from {
			if gap := time.Duration(l.granted - from); gap > bound {
				report(gap, l)
			}
		}
		// A grant within the last one's linger holds the key too: the
		// next gap counts from its end (the soak's redis seed
		// 1795392207 counted two hand-offs in a row as a gap).
		from = max(from, l.valid+int64(linger))
	}
	if gap := time.Duration(to - from); from < to && gap > bound {
		report(gap, nil)
	}
}

// stallsOf gathers each worker's "stall" events: stretches in which its
// process ran nothing (a loaded host, or a SIGSTOP).
func stallsOf(evs [][]Event) map[int][]span {
	out := map[int][]span{}
	for _, wevs := range evs {
		for _, e := range wevs {
			if e.Ev == "stall" {
				out[e.Worker] = append(out[e.Worker], span{e.T0, e.T})
			}
		}
	}
	return out
}

// window is a time a fault held: a worker paused or its links degraded, or
// a server down.
type window struct {
	who        int
	start, end int64
}

func touches(ws []window, who int, a, b int64) bool {
	for _, w := range ws {
		if w.who == who && w.start <= b && a <= w.end {
			return true
		}
	}
	return false
}

// verdict is what the rules found in one run.
type verdict struct {
	Violations []Violation    // rules the mode claims, broken
	Counted    map[string]int // every rule's breaks, claimed or not
	// WorstLossNotice is the longest a stale holder's Done stayed open
	// after another holder was granted (in the time its holder ran: its pauses left out).
	WorstLossNotice time.Duration
	// WorstRecovery is the longest from a fault's end to the next grant.
	WorstRecovery time.Duration
}

// judgeRandom applies rules (a)–(e), and RuleObserve where an observer
// ran, to a run's history.
func judgeRandom(evs [][]Event, c Check, tg *Target, m Mode, applied []Applied, stopT int64) verdict {
	v := verdict{Counted: map[string]int{}}
	claimed := func(rule string) bool {
		switch {
		case strings.HasPrefix(rule, "c-"), rule == RuleTokenOrder:
			return true
		}
		return m == Within
	}
	add := func(rule, format string, args ...any) {
		v.Counted[rule]++
		if claimed(rule) && v.Counted[rule] <= 5 { // the first few, with their ops
			v.Violations = append(v.Violations, Violation{rule, fmt.Sprintf(format, args...)})
		} else if claimed(rule) && v.Counted[rule] == 6 {
			v.Violations = append(v.Violations, Violation{rule, "… more of the same"})
		}
	}
	ls := leasesOf(evs)
	var paused, degraded []window
	var lastHeal int64
	for _, a := range applied {
		if a.Skipped != "" {
			continue
		}
		lastHeal = max(lastHeal, a.End)
		switch a.Kind {
		case KPauseHolder:
			paused = append(paused, window{a.Worker, a.Start, a.End})
			degraded = append(degraded, window{a.Worker, a.Start, a.End})
		case KBlackhole, KDelayLink, KDropReplies, KLateRequest:
			degraded = append(degraded, window{a.Worker, a.Start, a.End})
		case KDropAll:
			for w := range evs {
				degraded = append(degraded, window{w, a.Start, a.End})
			}
		}
	}

	// (a) mutual exclusion on [granted, locally-valid-until].
	for i, a := range ls {
		for _, b := range ls[i+1:] {
			if b.granted >= a.valid {
				continue
			}
			if a.worker != b.worker {
				add(RuleMutex, "%v and %v overlap by %v", a, b, time.Duration(min(a.valid, b.valid)-b.granted).Round(time.Millisecond))
			}
		}
	}
	// (b) token order.
	tokenOrder(ls, add)
	// (c) the guarded register.
	if c.StaleAccepts > 0 {
		for range c.StaleAccepts {
			add(RuleStale, "%d stale write(s) accepted", c.StaleAccepts)
		}
	}
	if c.LostUpdates > 0 {
		add(RuleLost, "%d acknowledged write(s) missing from the final counter %d", c.LostUpdates, c.Final)
	}
	if c.Linearizable == "illegal" {
		add(RuleLinear, "porcupine: the accepted read-modify-writes are not linearizable")
	}
	// (d) liveness: legitimate writes refused; recovery after the last
	// fault; leases kept through tolerated faults where the repair claims it.
	for _, we := range evs {
		for _, e := range we {
			if e.Ev == "write" && e.Result == "stale" && e.Valid {
				add(RuleLegit, "w%d tok %d: guarded write refused as stale at %.3fs while its lease stood", e.Worker, e.Token, float64(e.T)/1e9)
			}
		}
	}
	bound := tg.Election + time.Second + tg.Renew
	if lastHeal > 0 {
		freeGaps(ls, lastHeal, stopT, tg.Linger, bound, func(gap time.Duration, next *leaseRec) {
			if next == nil {
				add(RuleRecovery, "after the last fault healed (%.3fs), no grant for the last %v of the run", float64(lastHeal)/1e9, gap.Round(time.Millisecond))
				return
			}
			add(RuleRecovery, "after the last fault healed (%.3fs), the key was free with no grant for %v (bound: election/session %v + 1s + renew), until %v",
				float64(lastHeal)/1e9, gap.Round(time.Millisecond), tg.Election, *next)
		})
	}
	// A minority server that hangs with its connections open is a fault the
	// backend tolerates: once its clients had time to notice (hangGrace),
	// the lock works as after a heal.
	for _, a := range applied {
		if a.Skipped != "" || a.Kind != KHangServer || a.End-a.Start <= int64(hangGrace) {
			continue
		}
		from := a.Start + int64(hangGrace)
		freeGaps(ls, from, a.End, tg.Linger, bound, func(gap time.Duration, next *leaseRec) {
			what := "until the server resumed"
			if next != nil {
				what = "until " + next.String()
			}
			add(RuleHang, "server %d hung from %.3fs to %.3fs; %v into the hang the key was free with no grant for %v (bound: election/session %v + 1s + renew), %s",
				a.Target, float64(a.Start)/1e9, float64(a.End)/1e9, hangGrace, gap.Round(time.Millisecond), tg.Election, what)
		})
	}
	for _, a := range applied {
		if a.Skipped != "" {
			continue
		}
		next := stopT
		for _, l := range ls {
			if l.granted > a.End {
				next = l.granted
				break
			}
		}
		v.WorstRecovery = max(v.WorstRecovery, time.Duration(next-a.End))
	}
	stranded(evs, ls, tg, applied, degraded, stopT, add)
	if tg.repairs {
		stalls := stallsOf(evs)
		for _, l := range ls {
			// A lease reported lost because its release failed (Done closes
			// with ErrLeaseLost when the give-back may have reached a server)
			// was being given up, not kept: only a loss before the release.
			if l.lost == 0 || (l.released > 0 && l.lost >= l.released) || touches(degraded, l.worker, l.granted, l.lost) {
				continue
			}
			// A lease that ran out (no refresh extended it before its
			// deadline) while its holder's own process was frozen by the
			// host for all but a renewal interval and a node timeout of
			// the TTL before that deadline: the renewer had no time to
			// refresh, a pause the schedule did not inject. Counted apart,
			// not claimed. Never a loss the servers declared before the
			// deadline: a stall cannot make a server answer early.
			if lapsed := l.exp > 0 && l.exp <= l.lost; lapsed {
				frozen := time.Duration(overlap(union(stalls[l.worker], 0), l.exp-int64(tg.TTL), l.exp))
				if frozen >= tg.TTL-tg.Renew-tg.TTL/10 {
					v.Counted[RuleLeaseKept+"/host-stall"]++
					continue
				}
			}
			add(RuleLeaseKept, "%v was lost though its holder was neither paused nor cut off, and the servers' faults stayed within the tolerance", l)
		}
	}
	// (e) loss notice: a lease superseded by another holder's grant must
	// report its end (Done) before it where the backend claims so
	// (etcd's lease, ZooKeeper's session), within TTL + one renewal
	// interval otherwise; a paused holder from its resume.
	strict := tg.Guarantees.Backend == "etcd" || tg.Guarantees.Backend == "zookeeper"
	allow := lossNoticeSlack
	if !strict {
		allow += tg.TTL + tg.Renew
	}
	for _, a := range ls {
		for _, b := range ls {
			if b.worker == a.worker || b.granted <= a.granted || b.granted >= a.doneUntil {
				continue
			}
			// Counted in the time a's holder ran: less every pause of it
			// between the grant and its Done (the faulter may pause a
			// just-resumed holder again before its timers have run).
			var stops []span
			for _, w := range paused {
				if w.who == a.worker {
					stops = append(stops, span{w.start, w.end})
				}
			}
			d := time.Duration(a.doneUntil - b.granted - overlap(union(stops, 0), b.granted, a.doneUntil))
			v.WorstLossNotice = max(v.WorstLossNotice, d)
			if d > allow {
				add(RuleLossNotice, "%v still open %v after %v was granted (allowed %v)", a, d.Round(time.Millisecond), b, allow)
			}
			break // the first superseding grant is the one that counts
		}
	}
	observed(evs, add)
	return v
}

// tokenOrder checks (b): a grant whose attempt began after another grant
// returned must carry a larger fence (epoch, then token). ls is sorted by
// grant.
func tokenOrder(ls []leaseRec, add func(rule, format string, args ...any)) {
	maxAt := make([]int, len(ls)) // the lease with the largest fence among ls[:i+1]
	for i, l := range ls {
		maxAt[i] = i
		if i > 0 && !ls[maxAt[i-1]].fence.less(l.fence) {
			maxAt[i] = maxAt[i-1]
		}
	}
	for _, b := range ls {
		i := sort.Search(len(ls), func(i int) bool { return ls[i].granted >= b.t0 })
		if i > 0 && !ls[maxAt[i-1]].fence.less(b.fence) {
			add(RuleTokenOrder, "%v began after %v was granted, with a fence not above it", b, ls[maxAt[i-1]])
		}
	}
}

// strandBound is how long a healthy waiter may wait while the key is free
// (no lease holds it), counted from the end of the faults that overlap the
// wait: the election or session timeout, 1 s, one renewal interval, and
// the release timeout, within which the library gives back what an
// ambiguous attempt (a lost reply, a reset connection) may have taken. A
// lock stranded for a whole TTL (20 s in the mutation runs) is well past it.
func strandBound(tg *Target) time.Duration {
	return tg.Election + time.Second + tg.Renew + distlock.DefaultReleaseTimeout
}

// span is an interval of CLOCK_MONOTONIC ns.
type span struct{ a, b int64 }

// union sorts and merges spans, joining those less than gap apart.
func union(ss []span, gap int64) []span {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(x, y span) int { return cmpInt(x.a, y.a) })
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && s.a <= out[n-1].b+gap {
			out[n-1].b = max(out[n-1].b, s.b)
			continue
		}
		out = append(out, s)
	}
	return out
}

// overlap is the total length of sorted, disjoint ss within [a, b].
func overlap(ss []span, a, b int64) int64 {
	var n int64
	for _, s := range ss {
		if lo, hi := max(s.a, a), min(s.b, b); hi > lo {
			n += hi - lo
		}
	}
	return n
}

// stranded checks d-stranded: a waiter unable to take a free key. For each
// stretch a worker spends in Acquire (its attempts' [start, end], joined
// across the short pause after a failed one) while not paused or cut off
// itself, counted from the end of every fault overlapping the stretch, the
// time the key was free — no lease granted and still valid, plus the
// target's linger for a server-side lock that outlives its holder's
// validity — must stay within strandBound. It sees, during the run and not
// only after the last fault, a lock taken for nobody (an acquire whose
// reply was lost and never given back) and an attempt refused by its own
// give-back's tombstone (an owner reused across attempts).
func stranded(evs [][]Event, ls []leaseRec, tg *Target, applied []Applied, degraded []window, stopT int64, add func(rule, format string, args ...any)) {
	bound := int64(strandBound(tg))
	var busy []span
	for _, l := range ls {
		busy = append(busy, span{l.granted, l.valid + int64(tg.Linger)})
	}
	busy = union(busy, 0)
	var first int64 = math.MaxInt64
	for _, we := range evs {
		if len(we) > 0 {
			first = min(first, we[0].T)
		}
	}
	var free []span
	at := first
	for _, b := range busy {
		if b.a > at {
			free = append(free, span{at, b.a})
		}
		at = max(at, b.b)
	}
	if at < stopT {
		free = append(free, span{at, stopT})
	}
	for w, we := range evs {
		var waits []span
		for _, e := range we {
			if (e.Ev == "acquire" || e.Ev == "error" || e.Ev == "stopped") && e.T0 > 0 {
				waits = append(waits, span{e.T0, min(e.T, stopT)})
			}
		}
		var cut []span
		for _, d := range degraded {
			if d.who == w {
				cut = append(cut, span{d.start, d.end})
			}
		}
		cut = union(cut, 0)
		for _, wt := range union(waits, int64(200*time.Millisecond)) {
			// The healthy pieces of the wait, each from the end of the
			// faults overlapping it.
			pieces := []span{wt}
			for _, c := range cut {
				var next []span
				for _, p := range pieces {
					if c.b <= p.a || c.a >= p.b {
						next = append(next, p)
						continue
					}
					if c.a > p.a {
						next = append(next, span{p.a, c.a})
					}
					if c.b < p.b {
						next = append(next, span{c.b, p.b})
					}
				}
				pieces = next
			}
			for _, p := range pieces {
				from := p.a
				for _, a := range applied {
					if a.Skipped == "" && a.Start <= p.b && a.End >= p.a {
						from = max(from, a.End)
					}
				}
				if from >= p.b {
					continue
				}
				if n := overlap(free, from, p.b); n > bound {
					add(RuleStranded, "w%d waited %.3fs–%.3fs, %v of it on a free key (no lease held it) after the faults there had ended (bound: election/session %v + 1s + renew + release timeout %v)",
						w, float64(from)/1e9, float64(p.b)/1e9, time.Duration(n).Round(time.Millisecond), tg.Election, distlock.DefaultReleaseTimeout)
				}
			}
		}
	}
}
