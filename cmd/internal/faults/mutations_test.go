package faults

import (
	"flag"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

var (
	mutationsControl = flag.Bool("mutations.control", os.Getenv("FAULTS_MUTATIONS_CONTROL") != "", "also run each mutation's seed without the mutation, which must run clean")
	mutationsRun     = flag.Bool("mutations", os.Getenv("FAULTS_MUTATIONS") != "", "run TestMutations (or FAULTS_MUTATIONS=1; make mutations)")
)

// mutationCase is one known bug put back and the run that must catch it.
type mutationCase struct {
	name string
	// mutation is DISTLOCK_MUTATION (more than one name where the bug
	// shows only together with another).
	mutation string
	backend  string // a randomBackends name
	mode     Mode
	kinds    []Kind
	seed     uint64
	// expect are the rules a catch may break; the first is the bug's own.
	expect []string
	// target adjusts the deployment (a longer TTL, a short read timeout).
	target func(tg *Target) *Target
	span   time.Duration
	settle time.Duration
	gap    time.Duration
	think  time.Duration // how long a holder sits on its lease (twice, at most); 0: the default
	idle   time.Duration // a worker's sleep after each release, at most (the key free at times)
	retune float64       // the workers' -retune; 0: RunRandom's default
	wait   time.Duration // bound of each Acquire; 0: 10 s
	// linkDur is the [min, max] duration of link faults; zero: the kinds'.
	linkDur [2]time.Duration
	// script is the interleaving the bug needs, as fixed steps of the
	// schedule (GenOptions.Script, admitted as drawn steps are: within
	// the mode's tolerance); the seeded draws fill in around it.
	script []Step
	why    string
}

// redisAmbiguous is Redis with a lease TTL long enough (20 s) that a lock
// stranded for a whole TTL stands far out from the give-back bound
// (strandBound: 1 s + renew + the 5 s release timeout), and a short client
// read timeout, so that go-redis's own retries (MaxRetries 3: four tries)
// give up within about 1.5 s of dropped replies and the library sees the
// attempt as ambiguous.
func redisAmbiguous(tg *Target) *Target {
	c := *tg
	c.TTL = 20 * time.Second
	c.Renew = time.Second // the recovery bound uses Renew: keep it at the usual TTL's scale
	c.URL = func(a []string) string {
		return "redis://" + a[0] + "?dial_timeout=500ms&read_timeout=250ms&write_timeout=250ms"
	}
	return &c
}

func mutationCases() []mutationCase {
	return []mutationCase{
		{name: "guard-skipped", mutation: "guard-skipped", backend: "redis", mode: Within, kinds: []Kind{KPauseHolder}, seed: 7,
			expect: []string{RuleStale, RuleLost, RuleLinear}, span: 6 * time.Second, settle: 3 * time.Second, gap: time.Second,
			why: "a paused holder resumes after its lease passed to another and writes: the guard no longer refuses it"},
		{name: "token-restart", mutation: "token-restart", backend: "redis", mode: Beyond, kinds: []Kind{KKillRestart}, seed: 7,
			expect: []string{RuleTokenOrder, RuleLegit}, span: 4 * time.Second, settle: 3 * time.Second, gap: 700 * time.Millisecond,
			why: "Redis without persistence restarts with no counter: tokens start at 1 again, below the last holder's"},
		{name: "equal-token-accepted", mutation: "token-restart,equal-token-accepted", backend: "redis", mode: Beyond, kinds: []Kind{KKillRestart}, seed: 7,
			expect: []string{RuleStale}, span: 2 * time.Second, settle: 12 * time.Second, gap: 700 * time.Millisecond,
			why: "with tokens restarting at 1, a new holder reaches the token the fence already holds from another holder: the guard must refuse the equal token"},
		{name: "no-giveback", mutation: "no-giveback", backend: "redis", mode: Within, kinds: []Kind{KDropAll}, seed: 7,
			expect: []string{RuleStranded, RuleRecovery}, target: redisAmbiguous, span: 3 * time.Second, settle: 14 * time.Second, gap: time.Second,
			idle: 800 * time.Millisecond, wait: 30 * time.Second, linkDur: [2]time.Duration{2 * time.Second, 4 * time.Second},
			why: "every worker's replies dropped past go-redis's retries: an acquire that landed took the lock for nobody; without the give-back it stays for a whole TTL (20 s) while the waiters wait on a free key"},
		{name: "owner-reuse", mutation: "owner-reuse", backend: "redis", mode: Within, kinds: []Kind{KDropAll}, seed: 7,
			expect: []string{RuleStranded, RuleMutex, RuleRecovery}, target: redisAmbiguous, span: 3 * time.Second, settle: 14 * time.Second, gap: time.Second,
			idle: 800 * time.Millisecond, wait: 30 * time.Second, linkDur: [2]time.Duration{2 * time.Second, 4 * time.Second},
			why: "a waiter's attempts after an ambiguous one reuse its owner: the give-back's tombstone (release.lua) then refuses that owner for the TTL, so the waiter cannot take a free key. " +
				"The safety form of the bug (a late give-back deleting the later attempt's lock: two holders) needs the tombstones off too, which no mutation switches"},
		{name: "zk-requested-timeout", mutation: "zk-requested-timeout", backend: "zookeeper-clamped", mode: Within, kinds: []Kind{KBlackhole}, seed: 7,
			target: func(tg *Target) *Target { c := *tg; c.TTL = 4 * zkSession; return &c }, // the lease's own clock no longer ends it first
			expect: []string{RuleLossNotice, RuleMutex}, span: 8 * time.Second, settle: 4 * time.Second, gap: 2 * time.Second,
			think: 8 * time.Second, wait: 30 * time.Second, linkDur: [2]time.Duration{2500 * time.Millisecond, 5 * time.Second},
			// The first holder (granted at the schedule's 0, sitting at least
			// 2 s before its database work and 2 s in it: think/4 each) is cut
			// off at 0.5 s for 3.5 s: longer than the granted 1.5 s, shorter
			// than the asked 6 s, while the other two wait on the key.
			script: []Step{{At: 500 * time.Millisecond, Kind: KBlackhole, Target: -1, Dur: 3500 * time.Millisecond}},
			why: "the server grants 1.5 s of the 6 s asked for and expires the cut-off holder's session on it; a grace from the asked timeout (6 s/4 after go-zookeeper's disconnect) reports the loss after the next holder is granted. " +
				"The script cuts the first holder off for 3.5 s while it sits on its lease (think 8 s: at least 4 s) and the others wait"},
		{name: "redlock-no-repair", mutation: "redlock-no-repair", backend: "redlock", mode: Within, kinds: []Kind{KKillRestart}, seed: 7,
			expect: []string{RuleLeaseKept}, span: 12 * time.Second, settle: 3 * time.Second, gap: 1200 * time.Millisecond, think: 14 * time.Second, wait: 30 * time.Second,
			// The first holder (granted at the schedule's 0, holding at least
			// think/2 = 7 s) sees node 0 restart empty at 0.5 s, down 1.3 s
			// (a delayed restart: past the TTL, as the claim needs), and node
			// 1 at 5 s, as soon as the generator's tolerance allows a second
			// server fault (0.5 + 1.3 down + TTL + restart cost 2 s).
			script: []Step{
				{At: 500 * time.Millisecond, Kind: KKillRestart, Target: 0, Dur: 1300 * time.Millisecond},
				{At: 5 * time.Second, Kind: KKillRestart, Target: 1, Dur: 1300 * time.Millisecond},
			},
			why: "rolling restarts of one Redlock node at a time (within the tolerance): without the retake a healthy holder's lease shrinks below a majority and is lost. " +
				"The script restarts nodes 0 and 1 while the first holder sits on its lease (think 14 s: at least 7 s)"},
		{name: "refresh-unordered", mutation: "refresh-unordered", backend: "redis", mode: Within, kinds: []Kind{KLateRequest}, seed: 7,
			expect: []string{RuleMutex, RuleLossNotice}, span: 20 * time.Second, settle: 3 * time.Second, gap: 400 * time.Millisecond,
			// Waiters give up every 300 ms and try again: a lock cut short
			// sends no release notice, and a waiter would sleep until the
			// expiry the holder's last refresh promised.
			think: 4 * time.Second, wait: 300 * time.Millisecond, retune: 1,
			why: "a holder refreshes to a short TTL and at once to a long one; the short refresh's first copy is held past go-redis's read timeout, the resend answers, and the held copy lands after the long refresh: " +
				"without the refresh sequence it cuts the lock back to the short TTL and another worker takes the key while the holder counts on the long one"},
		{name: "etcd-no-keepalive", mutation: "etcd-no-keepalive", backend: "etcd3", mode: Within, kinds: []Kind{KHangServer}, seed: 7,
			expect: []string{RuleHang, RuleRecovery}, span: 2 * time.Second, settle: 3 * time.Second, gap: time.Second,
			script: []Step{{At: 500 * time.Millisecond, Kind: KHangServer, Target: 0, Dur: 35 * time.Second}},
			why:    "a member hangs with its connections open (SIGSTOP) for 35 s: without gRPC keep-alives the client never drops it, and the calls the balancer sends it wait out their contexts, the key free meanwhile"},
	}
}

// TestMutations puts each known bug back (internal/mutation, a worker
// built with -tags distlock_mutations) and runs the randomized harness on
// the backend it lives on with a fixed seed: the subtest passes only if
// the harness reports a violation of the bug's rule. With
// -mutations.control the same seed also runs without the mutation and
// must run clean. Slow (about 5 minutes): run by `make mutations` or with
// -mutations / FAULTS_MUTATIONS=1, not by `make test`.
func TestMutations(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness needs Linux")
	}
	if !*mutationsRun {
		t.Skip("slow: run with -mutations or FAULTS_MUTATIONS=1 (make mutations)")
	}
	sh := Setup(t)
	sh.mutantWorker(t)
	specs := map[string]BackendSpec{}
	for _, b := range randomBackends() {
		specs[b.Name] = b
	}
	targets := map[string]*Target{}
	outer := t
	for _, mc := range mutationCases() {
		t.Run(mc.name, func(t *testing.T) {
			tg := targets[mc.backend]
			if tg == nil {
				tg = specs[mc.backend].Start(outer) // shared by the subtests: outlives this one
				targets[mc.backend] = tg
			}
			if mc.target != nil {
				tg = mc.target(tg)
			}
			cfg := RandomConfig{Mode: mc.mode, Seed: mc.seed, Mutation: mc.mutation, Settle: mc.settle, Think: mc.think,
				Idle: mc.idle, Wait: mc.wait, Retune: mc.retune,
				Gen: GenOptions{Warmup: 500 * time.Millisecond, Span: mc.span, Kinds: mc.kinds, MeanGap: mc.gap, LinkDur: mc.linkDur, Script: mc.script}}
			if sc := Generate(cfg.Seed, tg, cfg.Mode, cfg.Gen); sc.Scripted != len(mc.script) {
				t.Fatalf("the generator admits %d of the %d scripted steps on %s in mode %s: the script is not a schedule the mode allows\n%v",
					sc.Scripted, len(mc.script), tg.Backend, mc.mode, sc)
			}
			row := RunRandom(t, sh, tg, cfg)
			t.Log(row)
			var caught []Violation // the bug's own rule first
			for _, rule := range mc.expect {
				for _, v := range row.Violations {
					if v.Rule == rule {
						caught = append(caught, v)
					}
				}
			}
			if len(caught) == 0 {
				t.Errorf("FINDING: mutation %s (%s) was not caught: no violation of %s with seed %d on %s; the run saw %v",
					mc.name, mc.why, strings.Join(mc.expect, " or "), mc.seed, tg.Backend, row.Violations)
			} else {
				t.Logf("caught %s: rule %s, seed %d, backend %s: %v", mc.name, caught[0].Rule, mc.seed, tg.Backend, caught[0])
			}
			if *mutationsControl {
				cfg.Mutation = ""
				ctl := RunRandom(t, sh, tg, cfg)
				t.Logf("control (no mutation, seed %d): %v", mc.seed, ctl)
				for _, v := range ctl.Violations {
					t.Errorf("control run without the mutation is not clean: %v", v)
				}
			}
		})
	}
}
