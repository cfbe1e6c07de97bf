package faults

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/redis"
)

// RandomConfig is one randomized run: a seeded schedule of overlapping
// faults while guarded workers acquire, renew, write and release.
type RandomConfig struct {
	Mode Mode
	Seed uint64
	Gen  GenOptions
	// Settle is how long the run goes on after the schedule's last fault
	// (recovery is checked in it).
	Settle time.Duration
	Think  time.Duration
	// Idle bounds a worker's random sleep after each release (0: none),
	// so that the key is free at times; Wait bounds each Acquire (0: 10 s).
	Idle, Wait time.Duration
	// Mutation, if set, is DISTLOCK_MUTATION for the workers, which then
	// run the binary built with -tags distlock_mutations.
	Mutation string
	// Retune is the workers' -retune (lock workload): with late-request
	// faults in the schedule, 0 means 0.5, so that a held request is often
	// a refresh that a later, longer one of the same lease must outlast.
	Retune float64
	// Workload is "" (the lock workload: acquire, write, release) or
	// WorkloadElection: candidates that lead for a random time up to Term
	// (0: 1.5 s), writing all along, plus one observer.
	Workload string
	Term     time.Duration
}

// Applied is a step as it ran.
type Applied struct {
	Step
	Start, End int64 // CLOCK_MONOTONIC
	Worker     int   // the worker hit (holder faults, delay-link), or -1
	Skipped    string
}

// RandomRow is a randomized run's result.
type RandomRow struct {
	Backend  string
	Workload string // "" (lock) or WorkloadElection
	Mode     Mode
	Seed     uint64
	Check    Check
	Election *ElectionStats // the election workload's terms and observations
	Faults   map[Kind]int   // faults injected (not skipped), by kind
	Applied  []Applied
	Schedule Schedule
	verdict
}

// String is the row as the test log prints it.
func (r RandomRow) String() string {
	var kinds []string
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(kinds)
	var rules []string
	for k, n := range r.Counted {
		rules = append(rules, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(rules)
	s := fmt.Sprintf("%s mode=%s seed=%d ops=%d ok=%d rej=%d unk=%d acq=%d faults[%s] broken[%s] violations=%d worst-loss-notice=%v worst-recovery=%v",
		r.Backend, r.Mode, r.Seed, r.Check.Writes, r.Check.Accepted, r.Check.Rejected, r.Check.Uncertain, r.Check.Acquires,
		strings.Join(kinds, " "), strings.Join(rules, " "), len(r.Violations),
		r.WorstLossNotice.Round(time.Millisecond), r.WorstRecovery.Round(time.Millisecond))
	if r.Election != nil {
		s = r.Workload + " " + s + " " + r.Election.String()
	}
	return s
}

// Broke reports whether a violation of rule was found.
func (r RandomRow) Broke(rule string) bool {
	for _, v := range r.Violations {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

// mutantWorker builds (once per Shared) the worker with the mutation switches.
func (sh *Shared) mutantWorker(t testing.TB) string {
	sh.mutantOnce.Do(func() { sh.mutant = buildWorker(t.TempDir(), "distlock_mutations") })
	if strings.HasPrefix(sh.mutant, "error: ") {
		t.Fatal(sh.mutant)
	}
	return sh.mutant
}

// RunRandom runs cfg's schedule against tg and checks the history.
func RunRandom(t testing.TB, sh *Shared, tg *Target, cfg RandomConfig) RandomRow {
	t.Helper()
	ctx := context.Background()
	sched := Generate(cfg.Seed, tg, cfg.Mode, cfg.Gen)
	t.Logf("%s: %s", tg.Backend, sched)
	kind := "random"
	if cfg.Workload != "" {
		kind += "-" + cfg.Workload
	}
	key := fmt.Sprintf("faults/%s/%s/%s/%d/%d", kind, tg.Backend, cfg.Mode, cfg.Seed, keySeq.Add(1))
	if _, err := sh.Pool.Exec(ctx, `INSERT INTO faults_counter (key, n) VALUES ($1, 0)`, key); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if d := os.Getenv("FAULTS_KEEP"); d != "" {
		var err error
		if dir, err = os.MkdirTemp(d, "random-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("logs in %s", dir)
	}
	env := &Env{Target: tg, Key: key, Guarded: true, Pool: sh.Pool}
	if cfg.Idle > 0 {
		env.WorkerArgs = append(env.WorkerArgs, "-idle", cfg.Idle.String())
	}
	if cfg.Wait > 0 {
		env.WorkerArgs = append(env.WorkerArgs, "-wait", cfg.Wait.String())
	}
	if cfg.Retune == 0 && slices.ContainsFunc(sched.Steps, func(st Step) bool { return st.Kind == KLateRequest }) {
		cfg.Retune = 0.5
	}
	if cfg.Retune > 0 && cfg.Workload == "" {
		env.WorkerArgs = append(env.WorkerArgs, "-retune", strconv.FormatFloat(cfg.Retune, 'g', -1, 64))
	}
	if cfg.Workload == WorkloadElection {
		if cfg.Term == 0 {
			cfg.Term = 1500 * time.Millisecond
		}
		env.WorkerArgs = append(env.WorkerArgs, "-workload", cfg.Workload, "-term", cfg.Term.String())
		env.Observer = true
	}
	if tg.proxyable {
		env.links = newLinks()
		t.Cleanup(env.links.close)
	}
	bin, environ := sh.Worker, []string(nil)
	if cfg.Mutation != "" {
		bin, environ = sh.mutantWorker(t), []string{"DISTLOCK_MUTATION=" + cfg.Mutation}
	}
	if cfg.Think == 0 {
		cfg.Think = 20 * time.Millisecond
	}
	stopAll := startWorkers(t, sh, env, dir, cellWorkers, bin, environ, cfg.Think, cfg.Seed)

	// The schedule's clock starts at the first grant: a holder fault before
	// it finds no holder, and a scripted interleaving (a holder cut off
	// while another waits, a holder spanning two restarts) is timed from
	// the first holder's grant, whatever the workers' start-up took.
	if _, _, err := env.waitHolder(ctx); err != nil {
		t.Logf("the schedule starts without a holder: %v", err)
	}
	f := &faulter{env: env, busy: map[int]bool{}, paused: map[int]bool{}, late: map[int]bool{}}
	start := Mono()
	var wg sync.WaitGroup
	applied := make([]Applied, len(sched.Steps))
	for i, st := range sched.Steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sleep(ctx, time.Duration(start+int64(st.At)-Mono()))
			applied[i] = f.apply(ctx, st)
		}()
	}
	wg.Wait()
	sleep(ctx, max(cfg.Settle, time.Duration(start+int64(sched.End())-Mono())+cfg.Settle))
	stopT := Mono()
	stopAll(30 * time.Second)
	heal(t, tg)
	lastT := Mono()

	var final int64
	if err := sh.Pool.QueryRow(ctx, `SELECT n FROM faults_counter WHERE key = $1`, key).Scan(&final); err != nil {
		t.Fatal(err)
	}
	evs := make([][]Event, len(env.Workers))
	readWorkerLogs(t, env, evs)
	row := RandomRow{Backend: tg.Backend, Workload: cfg.Workload, Mode: cfg.Mode, Seed: cfg.Seed, Check: check(evs, final, lastT),
		Faults: map[Kind]int{}, Applied: applied, Schedule: sched}
	if cfg.Workload == WorkloadElection {
		row.Election = electionStats(evs)
	}
	for _, a := range applied {
		if a.Skipped == "" {
			row.Faults[a.Kind]++
		} else {
			t.Logf("skipped %v: %s", a.Step, a.Skipped)
		}
	}
	row.verdict = judgeRandom(evs, row.Check, tg, cfg.Mode, applied, stopT)
	if len(row.Violations) > 0 { // the faults as they ran and the workers' warnings, to read the violations by
		for _, a := range applied {
			if a.Skipped == "" {
				t.Logf("applied %v: %.3fs–%.3fs, worker %d", a.Step, float64(a.Start)/1e9, float64(a.End)/1e9, a.Worker)
			}
		}
		for _, w := range env.Workers {
			if b, _ := os.ReadFile(w.stderr); len(b) > 0 {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("w%d stderr (last %d lines):\n%s", w.ID, min(len(lines), 20), strings.Join(lines[max(0, len(lines)-20):], "\n"))
			}
		}
	}
	return row
}

// faulter runs the steps of a schedule, several at once.
type faulter struct {
	env    *Env
	mu     sync.Mutex
	busy   map[int]bool // servers under a fault
	paused map[int]bool // workers stopped
	late   map[int]bool // workers with a request on hold: one at a time, or the resend's new connection is held too
	seq    int
}

// holder finds a worker that holds the lock and is not paused, within 2 s,
// and marks it paused if pause is set.
func (f *faulter) holder(ctx context.Context, pause bool) (*Worker, error) {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		f.mu.Lock()
		for _, w := range f.env.Workers {
			if !f.paused[w.ID] && readStatus(w.status) != 0 {
				if pause {
					f.paused[w.ID] = true
				}
				f.mu.Unlock()
				return w, nil
			}
		}
		f.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	return nil, fmt.Errorf("no holder within 2s")
}

func (f *faulter) claimServer(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy[i] {
		return false
	}
	f.busy[i] = true
	return true
}

func (f *faulter) claimLate(w int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.late[w] {
		return false
	}
	f.late[w] = true
	return true
}

func (f *faulter) freeLate(w int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.late, w)
}

func (f *faulter) freeServer(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.busy, i)
}

// toxic adds a toxic on worker w's links (to server s, or every server if
// s < 0) in both directions, under a unique name; the returned function
// removes it.
func (f *faulter) toxic(w, s int, typ, attrs string) (func(), error) {
	return f.toxicOn(w, s, typ, attrs, "upstream", "downstream")
}

func (f *faulter) toxicOn(w, s int, typ, attrs string, streams ...string) (func(), error) {
	f.mu.Lock()
	f.seq++
	name := fmt.Sprintf("%s-%d", typ, f.seq)
	f.mu.Unlock()
	var ps []*toxiproxy.Proxy
	for i, p := range f.env.links.proxies[w] {
		if s < 0 || i == s {
			ps = append(ps, p)
		}
	}
	var undo []func()
	remove := func() {
		for _, u := range undo {
			u()
		}
	}
	for _, p := range ps {
		for _, stream := range streams {
			n := name + "-" + stream
			js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, n, typ, stream, attrs)
			if err := f.env.links.addToxic(p, js); err != nil {
				remove()
				return nil, err
			}
			undo = append(undo, func() { f.env.links.removeToxic(p, n, typ) })
		}
	}
	return remove, nil
}

// apply runs one step to its end.
func (f *faulter) apply(ctx context.Context, st Step) Applied {
	a := Applied{Step: st, Worker: -1}
	tg := f.env.Target
	fail := func(format string, args ...any) Applied {
		a.Skipped = fmt.Sprintf(format, args...)
		if a.Start != 0 && a.End == 0 {
			a.End = Mono()
		}
		return a
	}
	switch st.Kind {
	case KPauseHolder:
		w, err := f.holder(ctx, true)
		if err != nil {
			return fail("%v", err)
		}
		a.Worker, a.Start = w.ID, Mono()
		if err := syscall.Kill(w.pid, syscall.SIGSTOP); err != nil {
			return fail("SIGSTOP: %v", err)
		}
		sleep(ctx, st.Dur)
		a.End = Mono()
		_ = syscall.Kill(w.pid, syscall.SIGCONT)
		f.mu.Lock()
		delete(f.paused, w.ID)
		f.mu.Unlock()
	case KBlackhole:
		w, err := f.holder(ctx, false)
		if err != nil {
			return fail("%v", err)
		}
		a.Worker, a.Start = w.ID, Mono()
		rm, err := f.toxic(w.ID, -1, "timeout", `{"timeout":0}`)
		if err != nil {
			return fail("toxic: %v", err)
		}
		sleep(ctx, st.Dur)
		rm()
		a.End = Mono()
	case KDelayLink:
		a.Worker, a.Start = st.Target, Mono()
		rm, err := f.toxic(st.Target, st.Server, "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, st.Param.Milliseconds(), st.Param.Milliseconds()/4))
		if err != nil {
			return fail("toxic: %v", err)
		}
		sleep(ctx, st.Dur)
		rm()
		a.End = Mono()
	case KDropReplies:
		a.Worker, a.Start = st.Target, Mono()
		rm, err := f.toxicOn(st.Target, -1, "timeout", `{"timeout":0}`, "downstream")
		if err != nil {
			return fail("toxic: %v", err)
		}
		sleep(ctx, st.Dur)
		rm()
		a.End = Mono()
	case KDropAll:
		a.Start = Mono()
		var undo []func()
		for w := range f.env.links.proxies {
			rm, err := f.toxicOn(w, -1, "timeout", `{"timeout":0}`, "downstream")
			if err != nil {
				for _, u := range undo {
					u()
				}
				return fail("toxic: %v", err)
			}
			undo = append(undo, rm)
		}
		sleep(ctx, st.Dur)
		for _, u := range undo {
			u()
		}
		a.End = Mono()
	case KLateRequest:
		w, err := f.holder(ctx, false)
		if err != nil {
			return fail("%v", err)
		}
		if !f.claimLate(w.ID) {
			return fail("worker %d has a request on hold already", w.ID)
		}
		defer f.freeLate(w.ID)
		a.Worker, a.Start = w.ID, Mono()
		rm, err := f.toxicOn(w.ID, -1, "late", fmt.Sprintf(`{"hold":%d,"count":1}`, st.Param.Milliseconds()), "upstream")
		if err != nil {
			return fail("toxic: %v", err)
		}
		sleep(ctx, st.Dur+st.Param) // a request held late in the window is delivered before the toxic goes
		rm()
		a.End = Mono()
	case KPauseServer, KHangServer, KKillRestart:
		if !f.claimServer(st.Target) {
			return fail("server %d already under a fault", st.Target)
		}
		defer f.freeServer(st.Target)
		s := tg.Servers[st.Target]
		a.Start = Mono()
		if st.Kind != KKillRestart {
			if err := s.Pause(); err != nil {
				return fail("pause: %v", err)
			}
			sleep(ctx, st.Dur)
			if err := s.Resume(); err != nil {
				return fail("resume: %v", err)
			}
		} else {
			if err := s.Kill(); err != nil {
				return fail("kill: %v", err)
			}
			sleep(ctx, st.Dur)
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err := s.Restart(rctx)
			cancel()
			if err != nil {
				a.End = Mono()
				a.Skipped = "" // it happened; heal retries the restart
				return a
			}
		}
		a.End = Mono()
	case KClockJump:
		k := redisnode.KeysFor(redis.DefaultPrefix, f.env.Key)
		c := goredis.NewClient(&goredis.Options{Addr: tg.Servers[st.Target].Addr(), ContextTimeoutEnabled: true})
		defer c.Close()
		a.Start = Mono()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Del(cctx, k.Lock).Err()
		cancel()
		a.End = Mono()
		if err != nil {
			return fail("DEL: %v", err)
		}
	}
	return a
}
