package faults

import (
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// TestStrandedRule: a waiter that spends longer than strandBound on a free
// key, after the faults there ended, breaks d-stranded; one that waits as
// long on a held key, or on a free key while a fault lasts, does not.
func TestStrandedRule(t *testing.T) {
	s := int64(time.Second)
	tg := &Target{Backend: "redis", TTL: 20 * time.Second, Renew: time.Second, Linger: 500 * time.Millisecond}
	bound := int64(strandBound(tg))
	ev := func(w int, kind string, tok, t0, t int64) Event {
		return Event{Worker: w, Ev: kind, Token: tok, T0: t0, T: t}
	}
	// Worker 0 holds at 1–2 s; worker 1 tries from 3 s and is granted at
	// 3 s + bound + 2 s: the key was free all along (a lock stranded for
	// nobody) — unless a fault ended late enough.
	stopT := 3*s + bound + 4*s
	evs := [][]Event{
		{ev(0, "start", 0, 0, s/2), ev(0, "acquire", 1, s, s), ev(0, "release", 1, 2*s, 2*s+1), ev(0, "exit", 0, 0, stopT)},
		{ev(1, "start", 0, 0, s/2), ev(1, "acquire", 2, 3*s, 3*s+bound+2*s), ev(1, "release", 2, 3*s+bound+3*s, 3*s+bound+3*s+1), ev(1, "exit", 0, 0, stopT)},
	}
	judge := func(applied []Applied, evs [][]Event) map[string]int {
		return judgeRandom(evs, check(evs, 0, stopT), tg, Within, applied, stopT).Counted
	}
	if n := judge(nil, evs)[RuleStranded]; n != 1 {
		t.Errorf("free key for bound+2s: d-stranded %d, want 1", n)
	}
	// A fault (on another worker) until 3 s + 3 s: the free time after it
	// is bound-1s, within the bound.
	fault := []Applied{{Step: Step{Kind: KDropReplies}, Start: 2 * s, End: 6 * s, Worker: 0}}
	if n := judge(fault, evs)[RuleStranded]; n != 0 {
		t.Errorf("free key mostly under a fault: d-stranded %d, want 0", n)
	}
	// The same wait, but worker 0 holds the key all along: not stranded.
	held := [][]Event{
		{ev(0, "start", 0, 0, s/2), ev(0, "acquire", 1, s, s), ev(0, "release", 1, 3*s+bound+2*s-1, 3*s+bound+2*s), ev(0, "exit", 0, 0, stopT)},
		evs[1],
	}
	if n := judge(nil, held)[RuleStranded]; n != 0 {
		t.Errorf("waiting on a held key: d-stranded %d, want 0", n)
	}
	// An attempt cut short by the end of the run counts too.
	stopped := [][]Event{
		evs[0],
		{ev(1, "start", 0, 0, s/2), ev(1, "stopped", 0, 3*s, stopT), ev(1, "exit", 0, 0, stopT)},
	}
	if n := judge(nil, stopped)[RuleStranded]; n != 1 {
		t.Errorf("stopped attempt on a free key: d-stranded %d, want 1", n)
	}
}

// TestGenerateLinkDur: LinkDur replaces the link faults' durations without
// moving the schedule (same starts, kinds and targets).
func TestGenerateLinkDur(t *testing.T) {
	tg := &Target{Backend: "redis", TTL: time.Second, Renew: time.Second / 3, proxyable: true}
	o := GenOptions{Warmup: 500 * time.Millisecond, Span: 10 * time.Second, Kinds: []Kind{KDropReplies, KDropAll, KBlackhole, KPauseHolder}}
	a := Generate(5, tg, Within, o)
	o.LinkDur = [2]time.Duration{2 * time.Second, 4 * time.Second}
	b := Generate(5, tg, Within, o)
	if len(a.Steps) == 0 || len(a.Steps) != len(b.Steps) {
		t.Fatalf("%d vs %d steps", len(a.Steps), len(b.Steps))
	}
	for i := range a.Steps {
		x, y := a.Steps[i], b.Steps[i]
		if x.At != y.At || x.Kind != y.Kind || x.Target != y.Target {
			t.Fatalf("step %d moved: %v vs %v", i, x, y)
		}
		if y.Kind != KPauseHolder && (y.Dur < 2*time.Second || y.Dur > 4*time.Second) {
			t.Errorf("step %d: %v outside LinkDur", i, y)
		}
	}
}

// TestLossNoticeCountsRunningTime: a superseded holder's Done is timed in
// the time it ran after the other's grant; a holder paused again right
// after its resume (before its timers ran) is not late, one that ran on
// without noticing is.
func TestLossNoticeCountsRunningTime(t *testing.T) {
	ms := int64(time.Millisecond)
	tg := &Target{Backend: "redis", TTL: time.Second, Renew: time.Second / 3, Linger: 500 * time.Millisecond,
		Guarantees: distlock.Guarantees{Backend: "redis"}}
	stopT := 8000 * ms
	evs := [][]Event{
		{{Worker: 0, Ev: "start", T: 500 * ms}, {Worker: 0, Ev: "acquire", Token: 1, T0: 1000 * ms, T: 1000 * ms},
			{Worker: 0, Ev: "lost", Token: 1, T: 5710 * ms, Exp: 2000 * ms}, {Worker: 0, Ev: "release", Token: 1, T0: 5720 * ms, T: 5721 * ms}},
		{{Worker: 1, Ev: "start", T: 500 * ms}, {Worker: 1, Ev: "acquire", Token: 2, T0: 1100 * ms, T: 2200 * ms},
			{Worker: 1, Ev: "release", Token: 2, T0: 2300 * ms, T: 2301 * ms}},
	}
	pause := func(a, b int64) Applied {
		return Applied{Step: Step{Kind: KPauseHolder}, Start: a * ms, End: b * ms, Worker: 0}
	}
	judge := func(applied []Applied) int {
		return judgeRandom(evs, check(evs, 0, stopT), tg, Within, applied, stopT).Counted[RuleLossNotice]
	}
	if n := judge([]Applied{pause(1500, 3000), pause(3001, 5700)}); n != 0 {
		t.Errorf("paused again at once after its resume: e-loss-notice %d, want 0", n)
	}
	if n := judge([]Applied{pause(1500, 3000)}); n != 1 {
		t.Errorf("ran 2.7 s after its resume without noticing: e-loss-notice %d, want 1", n)
	}
}

// TestGenerateScript: a script's steps take their places first and go
// through the drawn steps' admission (a second server down at once is
// beyond a tolerance of one); the draws fill in around them.
func TestGenerateScript(t *testing.T) {
	tg := &Target{Backend: "redlock", TTL: time.Second, Renew: time.Second / 3, proxyable: true, Redlock: true, repairs: true,
		Servers: make([]*testserver.Server, 3), Guarantees: distlock.Guarantees{FailuresTolerated: 1, RestartLosesLocks: true}}
	o := GenOptions{Warmup: 500 * time.Millisecond, Span: 12 * time.Second, MeanGap: 1200 * time.Millisecond, Kinds: []Kind{KKillRestart},
		Script: []Step{
			{At: 500 * time.Millisecond, Kind: KKillRestart, Target: 0, Dur: 1300 * time.Millisecond},
			{At: 5 * time.Second, Kind: KKillRestart, Target: 1, Dur: 1300 * time.Millisecond},
		}}
	sc := Generate(7, tg, Within, o)
	if sc.Scripted != 2 {
		t.Fatalf("admitted %d of 2 scripted steps:\n%v", sc.Scripted, sc)
	}
	for _, want := range o.Script {
		if !slices.Contains(sc.Steps, want) {
			t.Errorf("scripted %v missing:\n%v", want, sc)
		}
	}
	for i, st := range sc.Steps {
		if i > 0 && st.At < sc.Steps[i-1].At {
			t.Errorf("steps out of order:\n%v", sc)
		}
		if st.At > 500*time.Millisecond && st.At < 4800*time.Millisecond && st != o.Script[0] {
			t.Errorf("%v drawn while the scripted restart of server 0 counts against the tolerance", st)
		}
	}
	if len(sc.Steps) == 2 {
		t.Errorf("no draws around the script:\n%v", sc)
	}
	// Node 1 at 1 s, while node 0's restart still counts: beyond a
	// tolerance of one, refused; within Beyond it would run.
	o.Script[1].At = time.Second
	if sc := Generate(7, tg, Within, o); sc.Scripted != 1 {
		t.Errorf("within: admitted %d of 2 scripted steps, want 1 (the second is beyond the tolerance)", sc.Scripted)
	}
	if sc := Generate(7, tg, Beyond, o); sc.Scripted != 2 {
		t.Errorf("beyond: admitted %d of 2 scripted steps, want 2", sc.Scripted)
	}
	// A node whose restart forgets its locks, back within the TTL, frees a
	// lock its holder counts on (the soak's redlock seed 1795392219):
	// beyond the claim; within, every drawn restart stays down past it.
	short := Step{At: 500 * time.Millisecond, Kind: KKillRestart, Target: 0, Dur: 300 * time.Millisecond}
	o.Script = []Step{short}
	if sc := Generate(7, tg, Within, o); sc.Scripted != 0 {
		t.Errorf("within: a restart after 300 ms admitted")
	}
	if sc := Generate(7, tg, Beyond, o); sc.Scripted != 1 {
		t.Errorf("beyond: a restart after 300 ms refused")
	}
	for seed := range uint64(20) {
		for _, st := range Generate(seed, tg, Within, o).Steps {
			if st.Kind == KKillRestart && st != short && st.Dur <= tg.TTL {
				t.Errorf("seed %d: within, %v", seed, st)
			}
		}
	}
	t.Log(sc)
}

// TestLeaseKeptIgnoresFailedRelease: on Redlock, a lease lost while its
// healthy holder held it breaks d-lease-kept; one reported lost because
// its release failed (after the release began) does not.
func TestLeaseKeptIgnoresFailedRelease(t *testing.T) {
	ms := int64(time.Millisecond)
	tg := &Target{Backend: "redlock", TTL: time.Second, Renew: time.Second / 3, Redlock: true, repairs: true,
		Linger: 500 * time.Millisecond, Guarantees: distlock.Guarantees{Backend: "redlock", FailuresTolerated: 1}}
	stopT := 3000 * ms
	// The worker logs the loss as Done closes, the release once it returns.
	run := func(lost, release int64) int {
		evs := [][]Event{{{Worker: 0, Ev: "start", T: 10 * ms}, {Worker: 0, Ev: "acquire", Token: 1, T0: 100 * ms, T: 100 * ms},
			{Worker: 0, Ev: "lost", Token: 1, T: lost * ms, Exp: 1000 * ms},
			{Worker: 0, Ev: "release", Token: 1, T0: release * ms, T: (max(lost, release) + 1) * ms}}}
		return judgeRandom(evs, check(evs, 0, stopT), tg, Within, nil, stopT).Counted[RuleLeaseKept]
	}
	if n := run(600, 650); n != 1 {
		t.Errorf("lost while held: d-lease-kept %d, want 1", n)
	}
	if n := run(180, 120); n != 0 {
		t.Errorf("lost by a failed release: d-lease-kept %d, want 0", n)
	}
}

// TestLeaseKeptHostStall: a lease that ran out while its holder's process
// was frozen for all but a renewal interval and a node timeout of the TTL
// before its deadline (the soak's redlock seed 1795385814: granted with 16
// ms left after a stall mid-acquire) is counted apart and not claimed; a
// shorter or older stall excuses nothing.
func TestLeaseKeptHostStall(t *testing.T) {
	ms := int64(time.Millisecond)
	tg := &Target{Backend: "redlock", TTL: time.Second, Renew: time.Second / 3, Redlock: true, repairs: true,
		Linger: 500 * time.Millisecond, Guarantees: distlock.Guarantees{Backend: "redlock", FailuresTolerated: 1}}
	stopT := 4000 * ms
	run := func(stallFrom, stallTo int64) verdict {
		evs := [][]Event{{{Worker: 0, Ev: "start", T: 10 * ms}, {Worker: 0, Ev: "acquire", Token: 1, T0: 100 * ms, T: 1050 * ms},
			{Worker: 0, Ev: "stall", T0: stallFrom * ms, T: stallTo * ms},
			{Worker: 0, Ev: "lost", Token: 1, T: 2500 * ms, Exp: 2500 * ms},
			{Worker: 0, Ev: "release", Token: 1, T0: 2600 * ms, T: 2601 * ms}}}
		return judgeRandom(evs, check(evs, 0, stopT), tg, Within, nil, stopT)
	}
	for _, c := range []struct {
		name             string
		from, to         int64
		claimed, excused int
	}{
		{"frozen for most of the TTL before the lapse", 1550, 2450, 0, 1},
		{"200 ms of stall: the renewer had time", 1800, 2000, 1, 0},
		{"short stall", 1800, 1860, 1, 0},
		{"stall long before the loss", 1100, 1400, 1, 0},
	} {
		v := run(c.from, c.to)
		if got := len(v.Violations); got != c.claimed {
			t.Errorf("%s: %d claimed violations %v, want %d", c.name, got, v.Violations, c.claimed)
		}
		if got := v.Counted[RuleLeaseKept+"/host-stall"]; got != c.excused {
			t.Errorf("%s: %d losses put down to the host, want %d", c.name, got, c.excused)
		}
	}
}

// redlockTarget is a Redlock target with TTL 1 s whose node restarts lose
// locks (the redlock-no-repair shape).
func redlockTarget() *Target {
	return &Target{Backend: "redlock", TTL: time.Second, Renew: time.Second / 3, Redlock: true, repairs: true,
		Linger: 500 * time.Millisecond, Guarantees: distlock.Guarantees{Backend: "redlock", FailuresTolerated: 1, RestartLosesLocks: true}}
}

// A loss the backend declared (a refresh answered ErrNotHeld: lostOnServer)
// while the lease's confirmed deadline was still 700 ms ahead. A stall can
// only make a deadline lapse (refreshStart / refreshDone then report "ran
// out"); it cannot make a server say "not ours" early, since the server's
// expiry is always after the local deadline. One unrelated 120 ms stall in
// the TTL before the loss must not excuse it (as it would if the window ran
// back from the loss): such a loss is always claimed.
func TestHostStallNeverExcusesDeclaredLoss(t *testing.T) {
	ms := int64(time.Millisecond)
	tg, stopT := redlockTarget(), 4000*ms
	evs := [][]Event{{{Worker: 0, Ev: "start", T: 10 * ms},
		{Worker: 0, Ev: "acquire", Token: 1, T0: 100 * ms, T: 110 * ms},
		{Worker: 0, Ev: "stall", T0: 1700 * ms, T: 1820 * ms},
		{Worker: 0, Ev: "lost", Token: 1, T: 2000 * ms, Exp: 2700 * ms}, // judged lost, 700 ms of validity left
		{Worker: 0, Ev: "release", Token: 1, T0: 2010 * ms, T: 2011 * ms}}}
	v := judgeRandom(evs, check(evs, 0, stopT), tg, Within, nil, stopT)
	if v.Counted[RuleLeaseKept] != 1 {
		t.Errorf("declared loss with 700 ms of validity left: d-lease-kept %d, host-stall %d; want it claimed",
			v.Counted[RuleLeaseKept], v.Counted[RuleLeaseKept+"/host-stall"])
	}
}

// The redlock-no-repair shape: a long-held lease, node 1 restarted (within:
// down 1.3 s), no refresh reaches a quorum for a whole TTL and the lease
// lapses (Exp == lost). Two 55 ms scheduling blips in that second, each
// harmless (the renewer tries every TTL/3), add up to TTL/10 and must not
// excuse it: a lapse needs the process frozen for most of the window.
func TestHostStallBlipsExcuseNoLapse(t *testing.T) {
	ms := int64(time.Millisecond)
	tg, stopT := redlockTarget(), 9000*ms
	applied := []Applied{{Step: Step{Kind: KKillRestart, Target: 1, Dur: 1300 * time.Millisecond}, Start: 5000 * ms, End: 6300 * ms, Worker: -1}}
	evs := [][]Event{{{Worker: 0, Ev: "start", T: 10 * ms},
		{Worker: 0, Ev: "acquire", Token: 1, T0: 100 * ms, T: 110 * ms},
		{Worker: 0, Ev: "stall", T0: 5300 * ms, T: 5355 * ms},
		{Worker: 0, Ev: "stall", T0: 5700 * ms, T: 5755 * ms},
		{Worker: 0, Ev: "lost", Token: 1, T: 5980 * ms, Exp: 5980 * ms},
		{Worker: 0, Ev: "release", Token: 1, T0: 5990 * ms, T: 5991 * ms}}}
	v := judgeRandom(evs, check(evs, 0, stopT), tg, Within, applied, stopT)
	if v.Counted[RuleLeaseKept] != 1 {
		t.Errorf("lapse after 110 ms of blips: d-lease-kept %d, host-stall %d; want it claimed",
			v.Counted[RuleLeaseKept], v.Counted[RuleLeaseKept+"/host-stall"])
	}
}

// TestRecoveryChainsHandOffs: after the last fault heals, holders handing
// the key to each other (each grant within the last one's linger) leave no
// gap; a real gap after them still counts.
func TestRecoveryChainsHandOffs(t *testing.T) {
	ms := int64(time.Millisecond)
	tg := &Target{Backend: "redis", TTL: time.Second, Renew: time.Second / 3, Linger: 500 * time.Millisecond,
		Guarantees: distlock.Guarantees{Backend: "redis"}}
	heal := 1000 * ms
	applied := []Applied{{Step: Step{Kind: KPauseHolder}, Start: 500 * ms, End: heal, Worker: 2}}
	lease := func(w int, tok, from, to int64) []Event {
		return []Event{{Worker: w, Ev: "acquire", Token: tok, T0: from * ms, T: from * ms},
			{Worker: w, Ev: "release", Token: tok, T0: to * ms, T: to*ms + 1}}
	}
	run := func(last int64) int {
		evs := [][]Event{
			// The soak's case: the first grant after the heal, then a
			// hand-off within its linger, then another.
			append(lease(0, 1, 700, 950), lease(0, 3, 3301, 6000)...),
			lease(1, 2, 1030, 3300),
			lease(2, 4, last, last+100),
		}
		stopT := (last + 200) * ms
		return judgeRandom(evs, check(evs, 0, stopT), tg, Within, applied, stopT).Counted[RuleRecovery]
	}
	if n := run(6001); n != 0 {
		t.Errorf("back-to-back hand-offs: d-recovery %d, want 0", n)
	}
	if n := run(9000); n != 1 {
		t.Errorf("a 2.5 s gap after them: d-recovery %d, want 1", n)
	}
}

// TestGenerateZooKeeperPauseWithin: within the claim, a ZooKeeper server is
// never paused long enough for a stalled leader to expire sessions on
// waking (the soak's zookeeper3 overlap, seed 1795385826); beyond it, it is.
func TestGenerateZooKeeperPauseWithin(t *testing.T) {
	tg := &Target{Backend: "zookeeper", TTL: time.Second, Renew: time.Second / 3,
		Servers: make([]*testserver.Server, 3), Guarantees: distlock.Guarantees{FailuresTolerated: 1, SessionTTL: true}}
	o := GenOptions{Warmup: 500 * time.Millisecond, Span: 60 * time.Second, Kinds: []Kind{KPauseServer}}
	longest := map[Mode]time.Duration{}
	for seed := range uint64(20) {
		for _, m := range []Mode{Within, Beyond} {
			for _, st := range Generate(seed, tg, m, o).Steps {
				longest[m] = max(longest[m], st.Dur)
			}
		}
	}
	if longest[Within] == 0 || longest[Within] > zkMaxServerPause {
		t.Errorf("within: longest server pause %v, want (0, %v]", longest[Within], zkMaxServerPause)
	}
	if longest[Beyond] <= zkSession {
		t.Errorf("beyond: longest server pause %v, want some past the session timeout %v", longest[Beyond], zkSession)
	}
}

// TestHangRule: while a server hangs, a free key with no grant counts only
// past hangGrace; a hang-server fault is drawn only when asked for.
func TestHangRule(t *testing.T) {
	ms := int64(time.Millisecond)
	tg := &Target{Backend: "etcd3", TTL: time.Second, Renew: time.Second / 3, Linger: 500 * time.Millisecond,
		Election: 3 * time.Second, Servers: make([]*testserver.Server, 3), Guarantees: distlock.Guarantees{Backend: "etcd", FailuresTolerated: 1}}
	const hangEnd = 35_000
	applied := []Applied{{Step: Step{Kind: KHangServer, Target: 0, Dur: hangEnd * time.Millisecond}, Start: 0, End: hangEnd * ms, Worker: -1}}
	// Grants every 500 ms from 0 to 45 s but for a 9 s hole at hole.
	run := func(hole int64) int {
		var evs []Event
		tok := int64(1)
		for at := int64(0); at < 45_000; at += 500 {
			if at >= hole && at < hole+9_000 {
				continue
			}
			evs = append(evs, Event{Worker: 0, Ev: "acquire", Token: tok, T0: at * ms, T: at * ms},
				Event{Worker: 0, Ev: "release", Token: tok, T0: (at + 100) * ms, T: (at+100)*ms + 1})
			tok++
		}
		stopT := 45_000 * ms
		all := [][]Event{evs}
		return judgeRandom(all, check(all, 0, stopT), tg, Within, applied, stopT).Counted[RuleHang]
	}
	if n := run(5_000); n != 0 {
		t.Errorf("a 9 s hole within the grace: d-hang %d, want 0", n)
	}
	if n := run(24_000); n != 1 {
		t.Errorf("a 9 s hole past the grace: d-hang %d, want 1", n)
	}
	if n := run(60_000); n != 0 {
		t.Errorf("no hole: d-hang %d, want 0", n)
	}

	o := GenOptions{Warmup: 500 * time.Millisecond, Span: 60 * time.Second}
	for seed := range uint64(10) {
		for _, st := range Generate(seed, tg, Within, o).Steps {
			if st.Kind == KHangServer {
				t.Fatalf("seed %d: hang-server drawn though not asked for", seed)
			}
		}
	}
	o.Kinds = []Kind{KHangServer}
	var hangs int
	for seed := range uint64(10) {
		for _, st := range Generate(seed, tg, Within, o).Steps {
			if st.Kind != KHangServer || st.Dur < hangMin || st.Dur > hangMax {
				t.Fatalf("seed %d: %v, want hang-server steps of %v–%v", seed, st, hangMin, hangMax)
			}
			hangs++
		}
	}
	if hangs == 0 {
		t.Error("hang-server asked for, never drawn")
	}
}

// tokenOrderBreaks is how many times evs break b-token-order.
func tokenOrderBreaks(evs [][]Event) int {
	tg := &Target{Backend: "redis", TTL: time.Second, Renew: time.Second / 3, Linger: 500 * time.Millisecond}
	return judgeRandom(evs, check(evs, 0, 1000), tg, Within, nil, 1000).Counted[RuleTokenOrder]
}

// TestTokenOrderAcrossEpochRaise: grants at a raised epoch come after every
// grant of the old one whatever their tokens (a new backend's counter
// starts low), and within the new epoch tokens must still increase.
func TestTokenOrderAcrossEpochRaise(t *testing.T) {
	evs := [][]Event{
		{acq(0, 1000, 10), rel(0, 1000, 16), inEpoch(1, acq(0, 3, 40)), rel(0, 3, 46)},
		{acq(1, 1001, 20), rel(1, 1001, 26), inEpoch(1, acq(1, 5, 50)), rel(1, 5, 56)},
	}
	if n := tokenOrderBreaks(evs); n != 0 {
		t.Fatalf("b-token-order %d, want 0: epoch 1 outranks epoch 0 whatever the tokens", n)
	}
}

// TestTokenOrderEqualTokenInNewEpoch: a grant at epoch 1 with the number an
// epoch-0 grant had is above it (the epoch decides), while a smaller token
// than an earlier grant's within one epoch is still out of order.
func TestTokenOrderEqualTokenInNewEpoch(t *testing.T) {
	evs := [][]Event{
		{acq(0, 7, 10), rel(0, 7, 16)},
		{inEpoch(1, acq(1, 7, 20)), rel(1, 7, 26)},
	}
	if n := tokenOrderBreaks(evs); n != 0 {
		t.Fatalf("b-token-order %d, want 0: epoch 1 token 7 is above epoch 0 token 7", n)
	}
	evs[0] = append(evs[0], inEpoch(1, acq(0, 6, 40)), rel(0, 6, 46))
	if n := tokenOrderBreaks(evs); n != 1 {
		t.Fatalf("b-token-order %d, want 1: epoch 1 token 6 after epoch 1 token 7", n)
	}
}
