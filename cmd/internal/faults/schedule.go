package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a fault kind of the randomized schedule.
type Kind string

// The fault kinds the generator mixes.
const (
	KPauseHolder Kind = "pause-holder"     // SIGSTOP the current holder for longer than the TTL
	KPauseServer Kind = "pause-server"     // SIGSTOP one server (and its children)
	KKillRestart Kind = "kill-restart"     // SIGKILL one server, restart it on its data dir
	KBlackhole   Kind = "blackhole-holder" // drop all bytes on the current holder's links
	KDelayLink   Kind = "delay-link"       // latency on one worker's link to one server (one connection slow, others not)
	KClockJump   Kind = "clock-jump"       // Redlock: the holder's key expires early on one node (DEL)
	KDropReplies Kind = "drop-replies"     // one worker's replies dropped (requests still land): lost acquire replies
	// KDropAll drops every worker's replies at once (requests still land):
	// every attempt under way is ambiguous at the same time, so whether the
	// key is free afterwards rests on the give-backs alone.
	KDropAll Kind = "drop-replies-all"
	// KLateRequest holds the current holder's next request to each server
	// (Param long) and lets everything after it through: past the client's
	// read timeout, go-redis resends it on a new connection, which lands
	// first, and the held copy lands late (Redis and Redlock).
	KLateRequest Kind = "late-request"
	// KHangServer SIGSTOPs one server of a cluster for longer than its
	// clients need to notice a member that hangs with its connections
	// open (hangMin–hangMax), while the others carry on: the lock must keep
	// working past hangGrace (RuleHang). Opt-in (GenOptions.Kinds), as it
	// outlasts the usual spans; not in AllKinds.
	KHangServer Kind = "hang-server"
)

// hangMin and hangMax bound a hang-server fault; hangGrace is how long
// after the hang begins the lock must work again: etcd's client drops a
// silent connection within its keep-alive time and timeout (10 s + 5 s),
// then a waiter's next read of the queue comes within 5 s.
const (
	hangMin   = 30 * time.Second
	hangMax   = 40 * time.Second
	hangGrace = 20 * time.Second
)

// AllKinds lists every kind the generator knows.
var AllKinds = []Kind{KPauseHolder, KPauseServer, KKillRestart, KBlackhole, KDelayLink, KClockJump, KDropReplies, KDropAll,
	KLateRequest}

// Mode of a randomized run.
type Mode string

const (
	// Within keeps the schedule inside what the backend declares it
	// tolerates (Guarantees: FailuresTolerated, RestartLosesLocks,
	// ClockDependent) and its TTL assumptions: every rule (a)–(e) is claimed.
	Within Mode = "within"
	// Beyond exceeds the declared tolerance on purpose (servers of a single
	// node paused and killed, majorities lost, restarts that lose locks,
	// clock jumps): only "the guard still rejects stale writes" — rule (c),
	// and the token order (b) — is claimed; the rest is counted.
	Beyond Mode = "beyond"
)

// Step is one fault of a schedule.
type Step struct {
	At   time.Duration // from the run's first grant (RunRandom starts the clock there)
	Kind Kind
	// Target is the server index (server faults), the worker (delay-link),
	// or -1: the current holder, found when the step runs.
	Target int
	Server int           // delay-link: the server whose link is slowed
	Dur    time.Duration // how long the fault lasts (down time for kill-restart)
	Param  time.Duration // delay-link: the latency each way; late-request: how long the request is held
}

// String is one line of a printed schedule.
func (s Step) String() string {
	tgt := "holder"
	switch {
	case s.Kind == KDelayLink:
		tgt = fmt.Sprintf("worker %d→server %d, %v each way", s.Target, s.Server, s.Param)
	case s.Kind == KDropReplies:
		tgt = fmt.Sprintf("worker %d (replies)", s.Target)
	case s.Kind == KDropAll:
		tgt = "every worker (replies)"
	case s.Kind == KLateRequest:
		tgt = fmt.Sprintf("holder's next request, held %v", s.Param)
	case s.Target >= 0:
		tgt = fmt.Sprintf("server %d", s.Target)
	}
	return fmt.Sprintf("%6.2fs %-16s %-28s for %v", s.At.Seconds(), s.Kind, tgt, s.Dur.Round(time.Millisecond))
}

// Schedule is a seeded list of overlapping faults. The same seed, target
// shape and options give the same schedule.
type Schedule struct {
	Seed  uint64
	Mode  Mode
	Steps []Step
	// Scripted is how many of GenOptions.Script's steps were admitted
	// (each of them is in Steps).
	Scripted int
}

// String prints the schedule, one step per line, for reproducing a run.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule seed=%d mode=%s, %d faults", s.Seed, s.Mode, len(s.Steps))
	if s.Scripted > 0 {
		fmt.Fprintf(&b, " (%d scripted)", s.Scripted)
	}
	b.WriteString(":\n")
	for _, st := range s.Steps {
		b.WriteString("  " + st.String() + "\n")
	}
	return b.String()
}

// End is when the last fault of the schedule is over (by its nominal
// duration; a restart takes longer).
func (s Schedule) End() time.Duration {
	var e time.Duration
	for _, st := range s.Steps {
		e = max(e, st.At+st.Dur)
	}
	return e
}

// GenOptions shape a schedule.
type GenOptions struct {
	Span  time.Duration // faults start within [Warmup, Span)
	Kinds []Kind        // allowed kinds; nil: all that apply
	// MeanGap is the mean time between fault starts (exponential): faults
	// longer than the gap overlap.
	MeanGap time.Duration
	Warmup  time.Duration
	// LinkDur, when set, is the [min, max] duration of link faults
	// (blackhole-holder, drop-replies, drop-replies-all) instead of each
	// kind's default range; the draws are the same, so a seed's schedule
	// keeps its shape.
	LinkDur [2]time.Duration
	// Script is a fixed list of faults the schedule must hold, for a run
	// that has to meet one interleaving (a holder cut off while another
	// worker waits, a holder spanning restarts of two different nodes).
	// Its steps go through the same admission as drawn ones — a kind that
	// applies to the target in the mode and is among Kinds, and, for
	// server faults, a server not already faulty and within the mode's
	// tolerance — and take their places first: the seeded draws then fill
	// in around them (none when Span ends before the first draw). A
	// scripted step not admitted is left out of the schedule; see
	// Schedule.Scripted.
	Script []Step
}

// restartCost is the time a kill-restart keeps a server from serving,
// estimated generously for the tolerance bookkeeping, beyond its down time.
// delayedRestart is how long a server whose restart forgets its locks
// (Redlock's nodes without fsync) stays down within the claim: past the TTL,
// so that every lock it held would have expired by then anyway (the
// "delayed restart" of the Redlock description). Back sooner, it frees a
// lock its holder still counts on: the soak's redlock seed 1795392219 saw a
// node back after 123 ms hand a second client the lock.
func delayedRestart(tg *Target) time.Duration { return tg.TTL + tg.TTL/5 }

func restartCost(tg *Target) time.Duration {
	if tg.Cluster != nil {
		return 8 * time.Second
	}
	return 2 * time.Second
}

// applicable reports whether kind k can run on tg in mode m.
func applicable(k Kind, tg *Target, m Mode) bool {
	g := tg.Guarantees
	single := len(tg.Servers) == 1
	switch k {
	case KPauseHolder:
		return true
	case KBlackhole, KDelayLink, KDropReplies, KDropAll:
		return tg.proxyable
	case KLateRequest:
		return tg.proxyable && tg.resends
	case KPauseServer, KHangServer:
		// Within: a minority of a cluster; never a single server.
		return m == Beyond || (g.FailuresTolerated > 0 && !single)
	case KKillRestart:
		// Within: only where a restart keeps locks, or where a refresh
		// takes them back (Redlock's repair), a minority at a time.
		if m == Beyond {
			return true
		}
		return g.FailuresTolerated > 0 && !single && (!g.RestartLosesLocks || tg.repairs)
	case KClockJump:
		return m == Beyond && tg.Redlock
	}
	return false
}

// Generate draws a schedule for tg from seed: o.Script's steps that it
// admits, then seeded draws around them, in order of their start.
func Generate(seed uint64, tg *Target, m Mode, o GenOptions) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x6661756c7473)) // "faults"
	if o.MeanGap <= 0 {
		o.MeanGap = 700 * time.Millisecond
	}
	var kinds []Kind
	for _, k := range append(slices.Clip(AllKinds), KHangServer) {
		if k == KHangServer && !slices.Contains(o.Kinds, k) {
			continue // opt-in
		}
		if (o.Kinds == nil || slices.Contains(o.Kinds, k)) && applicable(k, tg, m) {
			kinds = append(kinds, k)
		}
	}
	sc := Schedule{Seed: seed, Mode: m}
	if len(kinds) == 0 {
		return sc
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	linkDur := func(lo, hi time.Duration) time.Duration {
		if o.LinkDur[1] > 0 {
			lo, hi = o.LinkDur[0], o.LinkDur[1]
		}
		return between(lo, hi)
	}
	// Server fault windows (start, end incl. recovery), for the tolerance.
	type win struct {
		server     int
		start, end time.Duration
	}
	var wins []win
	tol := tg.Guarantees.FailuresTolerated
	n := len(tg.Servers)
	// admit reports whether st may join the schedule: its kind applies,
	// and a server fault finds its server healthy and stays within the
	// tolerance (it then holds its window).
	admit := func(st Step) bool {
		if !slices.Contains(kinds, st.Kind) {
			return false
		}
		switch st.Kind {
		case KPauseServer, KHangServer, KKillRestart, KClockJump:
			if st.Target < 0 || st.Target >= n {
				return false
			}
		case KDelayLink:
			if st.Target < 0 || st.Target >= cellWorkers || st.Server < 0 || st.Server >= n {
				return false
			}
		case KDropReplies:
			if st.Target < 0 || st.Target >= cellWorkers {
				return false
			}
		}
		if st.Kind != KPauseServer && st.Kind != KHangServer && st.Kind != KKillRestart {
			return true
		}
		if st.Kind == KKillRestart && m == Within && tg.Guarantees.RestartLosesLocks && st.Dur < delayedRestart(tg) {
			return false // back before its locks would have expired: beyond the claim
		}
		end := st.At + st.Dur + tg.TTL // the repair needs a renewal or two after
		if st.Kind == KKillRestart {
			end += restartCost(tg)
		}
		busy := map[int]bool{}
		for _, w := range wins {
			if w.start < end && st.At < w.end {
				busy[w.server] = true
			}
		}
		if busy[st.Target] {
			return false // that server is already faulty then
		}
		if m == Within && len(busy)+1 > tol {
			return false // beyond the declared tolerance
		}
		wins = append(wins, win{st.Target, st.At, end})
		return true
	}
	for _, st := range o.Script {
		if admit(st) {
			sc.Steps = append(sc.Steps, st)
			sc.Scripted++
		}
	}
	for at := o.Warmup; ; {
		at += time.Duration(rng.ExpFloat64() * float64(o.MeanGap))
		if at >= o.Span {
			break
		}
		k := kinds[rng.IntN(len(kinds))]
		st := Step{At: at, Kind: k, Target: -1}
		switch k {
		case KPauseHolder:
			// Longer than the TTL (renewal included), up to three TTLs.
			st.Dur = between(tg.TTL+tg.TTL/2, 3*tg.TTL)
		case KBlackhole:
			st.Dur = linkDur(tg.TTL/2, 3*tg.TTL)
		case KDelayLink:
			st.Target, st.Server = rng.IntN(cellWorkers), rng.IntN(n)
			st.Dur = between(500*time.Millisecond, 3*time.Second)
			st.Param = between(20*time.Millisecond, 400*time.Millisecond)
		case KClockJump:
			st.Target = rng.IntN(n)
		case KDropReplies:
			st.Target = rng.IntN(cellWorkers)
			st.Dur = linkDur(500*time.Millisecond, 3*time.Second) // beyond go-redis's own retries
		case KDropAll:
			st.Dur = linkDur(500*time.Millisecond, 3*time.Second)
		case KLateRequest:
			// Whichever request comes next within the TTL is held past
			// the read timeout (lateReadTimeout), short of the TTL.
			st.Dur = tg.TTL
			st.Param = between(tg.TTL/4, tg.TTL/2)
		case KHangServer:
			st.Target = rng.IntN(n)
			st.Dur = between(hangMin, hangMax)
		case KPauseServer, KKillRestart:
			st.Target = rng.IntN(n)
			if k == KPauseServer {
				st.Dur = between(300*time.Millisecond, 3*time.Second)
				if m == Within && tg.Guarantees.SessionTTL {
					// A ZooKeeper leader stalled past what its sessions
					// last, yet short of being deposed, expires them
					// all on waking with no notice to their holders:
					// outside the backend's documented condition, which
					// these test ensembles (syncLimit·tickTime 3 s) do
					// not meet. Within the claim, a pause stays short
					// of that.
					st.Dur = min(st.Dur, zkMaxServerPause)
				}
			} else if m == Within && tg.Guarantees.RestartLosesLocks {
				st.Dur = between(delayedRestart(tg), 2*tg.TTL)
			} else {
				st.Dur = between(100*time.Millisecond, time.Second)
			}
		}
		if admit(st) {
			sc.Steps = append(sc.Steps, st)
		}
	}
	slices.SortStableFunc(sc.Steps, func(a, b Step) int { return cmpInt(int64(a.At), int64(b.At)) })
	return sc
}
