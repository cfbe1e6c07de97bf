package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faults/matrixfile"
)

const benchHelp = `
Usage: distlock bench [flags]

Measures each backend URL given with --url (repeatable), or, with none,
every registered backend on local servers it starts from the installed
binaries (mem://; redis://, redlock:// on 5 nodes, etcd://, zk:// when those
backends are registered and redis-server, etcd, java+ZooKeeper are installed).

Measurements, each run for --duration and repeated --repeat times, the
backends side by side (every backend's repeat i runs before any repeat i+1):
  uncontended   acquire+release on one key by one client: p50/p99/p99.9, ops/s
  contended     k clients on one key (--workers): throughput, wait p99,
                fewest/most acquisitions of one client (fairness)
  manykeys      8 goroutines on one Locker over 512 distinct keys
  handoff       release → next holder acquired (one monotonic clock),
                at hold times 0, 5 and 50 ms (at 0 the next client may not
                be waiting yet: then it is its first attempt on a free key)
  crash         a holder process is SIGKILLed (no release, no renewal):
                time until a waiting client acquires (in-process for mem://)

Figures are reported as the median over repeats with min..max beside it,
so the noise of the machine shows.
`

// benchConfig is bench's (and compare's) flags.
type benchConfig struct {
	urls     []string
	duration time.Duration
	repeat   int
	workers  []int
	measures []string
	crashTTL time.Duration
	jsonPath string
	htmlPath string
	textPath string
	dir      string
	quiet    bool
	// faultsPath is compare's --faults file; "" means defaultFaults if it exists.
	faultsPath string
}

var allMeasures = []string{"uncontended", "contended", "manykeys", "handoff", "crash"}

// handoffHolds are the hold times of the hand-off measurement.
var handoffHolds = []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond}

// urlList is a repeatable --url flag.
type urlList []string

func (u *urlList) String() string     { return strings.Join(*u, ",") }
func (u *urlList) Set(s string) error { *u = append(*u, s); return nil }

// intList is a comma-separated list of positive integers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 256 {
			return fmt.Errorf("%q: want integers in 1..256", f)
		}
		*l = append(*l, n)
	}
	return nil
}

// strList is a comma-separated list.
type strList []string

func (l *strList) String() string { return strings.Join(*l, ",") }
func (l *strList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allMeasures, f) {
			return fmt.Errorf("unknown measurement %q (known: %s)", f, strings.Join(allMeasures, ","))
		}
		*l = append(*l, f)
	}
	return nil
}

// benchFlags declares the flags bench and compare share.
func benchFlags(name, help string, s stdio) (*benchConfig, func([]string) (int, bool)) {
	c := &benchConfig{workers: []int{2, 8, 32}, measures: slices.Clone(allMeasures)}
	fs := newFlags(name, help, s)
	fs.Var((*urlList)(&c.urls), "url", "backend URL to measure (repeatable); none: start local servers for every registered backend")
	fs.DurationVar(&c.duration, "duration", 500*time.Millisecond, "length of each timed measurement")
	fs.IntVar(&c.repeat, "repeat", 3, "repeats of each measurement (min/median/max are reported)")
	fs.Var((*intList)(&c.workers), "workers", "client counts of the contended measurement")
	fs.Var((*strList)(&c.measures), "measure", "measurements to run: "+strings.Join(allMeasures, ","))
	fs.DurationVar(&c.crashTTL, "crash-ttl", 2*time.Second, "lease TTL of the crashed holder")
	fs.StringVar(&c.jsonPath, "json", "", "write the results as JSON to this file")
	fs.StringVar(&c.htmlPath, "html", "", "write a self-contained HTML report with charts to this file")
	fs.StringVar(&c.textPath, "text", "", "also write the text table to this file")
	fs.StringVar(&c.dir, "dir", "", "directory for local servers' data and the fsync probe (default: the system temp dir)")
	fs.BoolVar(&c.quiet, "q", false, "no progress on stderr")
	if name == "compare" {
		fs.StringVar(&c.faultsPath, "faults", "", "fault-matrix JSON to include (written by: "+matrixfile.Command(defaultFaults)+"); default "+defaultFaults+" if it exists")
	}
	return c, func(args []string) (int, bool) {
		if code, ok := parseFlags(fs, args, s); !ok {
			return code, false
		}
		switch {
		case fs.NArg() > 0:
			return usageError(s, name, "unexpected argument %q", fs.Arg(0)), false
		case c.duration <= 0 || c.duration > 10*time.Minute:
			return usageError(s, name, "--duration %v out of range (0, 10m]", c.duration), false
		case c.repeat < 1 || c.repeat > 100:
			return usageError(s, name, "--repeat %d out of range 1..100", c.repeat), false
		case c.crashTTL < 100*time.Millisecond || c.crashTTL > time.Minute:
			return usageError(s, name, "--crash-ttl %v out of range [100ms, 1m]", c.crashTTL), false
		}
		for _, u := range c.urls {
			if err := checkURL(u); err != nil {
				return usageError(s, name, "%v", err), false
			}
		}
		return 0, true
	}
}

// checkURL rejects URLs no registered backend can open, before any work.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("--url %q: %v", raw, err)
	}
	if !registered(u.Scheme) {
		return fmt.Errorf("--url %q: unknown scheme %q (registered: %s)", raw, u.Scheme, strings.Join(schemes(), ", "))
	}
	return nil
}

func cmdBench(ctx context.Context, args []string, s stdio) int {
	c, parse := benchFlags("bench", benchHelp, s)
	if code, ok := parse(args); !ok {
		return code
	}
	// Ctrl-C stops the run cleanly: local servers are stopped and their
	// directories removed.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := benchAll(ctx, c, s)
	if err != nil {
		fmt.Fprintf(s.err, "distlock bench: %v\n", err)
		return exitFailure
	}
	rep.Kind = "bench"
	return writeReports(rep, c, s)
}

// Stat is a figure's spread over repeats.
type Stat struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// Figure is one measured quantity of one backend.
type Figure struct {
	Group string    `json:"group"` // e.g. "contended k=8"
	Name  string    `json:"name"`  // e.g. "wait p99"
	Unit  string    `json:"unit"`  // "ms", "ops/s", "acq", "s"
	Runs  []float64 `json:"runs"`  // one value per successful repeat
	Stat  Stat      `json:"stat"`
}

// BackendResult is everything measured on one URL.
type BackendResult struct {
	URL        string              `json:"url"`
	Backend    string              `json:"backend"`
	Server     string              `json:"server"`
	Guarantees distlock.Guarantees `json:"guarantees"`
	Figures    []*Figure           `json:"figures"`
	Errors     []string            `json:"errors,omitempty"`
	// FaultRows are the fault-matrix rows of this backend (compare only).
	FaultRows []matrixfile.Row `json:"fault_rows,omitempty"`
	// Samples are latencies in ms by group, all repeats, for charts.
	Samples map[string][]float64 `json:"-"`
}

// Report is one bench or compare run.
type Report struct {
	Kind     string           `json:"kind"`
	Args     []string         `json:"args"`
	Duration string           `json:"duration"`
	Repeat   int              `json:"repeat"`
	Env      Environment      `json:"environment"`
	Backends []*BackendResult `json:"backends"`
	Notes    []string         `json:"notes,omitempty"`
	Elapsed  string           `json:"elapsed"`
	// FaultMatrix is compare's fault-matrix section; its rows are in each
	// backend's FaultRows.
	FaultMatrix *FaultMatrix `json:"fault_matrix,omitempty"`
}

func (r *BackendResult) figure(group, name, unit string) *Figure {
	for _, f := range r.Figures {
		if f.Group == group && f.Name == name {
			return f
		}
	}
	f := &Figure{Group: group, Name: name, Unit: unit}
	r.Figures = append(r.Figures, f)
	return f
}

// value is one figure of one repeat.
type value struct {
	name, unit string
	v          float64
}

// step is one measurement of one backend, run once per repeat.
type step struct {
	group string
	run   func(ctx context.Context, b *backend, key string) ([]value, []float64, error)
}

// backend is a URL being measured, with the Lockers opened for it (opened
// once and shared by the steps, so connection set-up is not measured).
type backend struct {
	url     string
	cfg     *benchConfig
	mu      sync.Mutex
	lockers []distlock.Locker
	res     *BackendResult
}

// lockersN returns n Lockers on the URL, opening the missing ones.
func (b *backend) lockersN(ctx context.Context, n int) ([]distlock.Locker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.lockers) < n {
		l, err := openLocker(ctx, b.url)
		if err != nil {
			return nil, err
		}
		b.lockers = append(b.lockers, l)
	}
	return b.lockers[:n], nil
}

func (b *backend) close() {
	for _, l := range b.lockers {
		_ = l.Close()
	}
}

// benchAll measures every target and returns the report, without figures
// written anywhere.
func benchAll(ctx context.Context, c *benchConfig, s stdio) (*Report, error) {
	began := time.Now()
	prog := newProgress(s.err, c.quiet)
	dir := c.dir
	if dir == "" {
		dir = os.TempDir()
	}
	rep := &Report{Args: os.Args[1:], Duration: c.duration.String(), Repeat: c.repeat}
	var targets []target
	if len(c.urls) == 0 {
		var ls *localServers
		targets, ls = startLocal(ctx, dir, prog.note)
		defer ls.Close()
		rep.Notes = append(rep.Notes, ls.notes...)
	} else {
		for _, u := range c.urls {
			targets = append(targets, target{URL: u, Server: serverVersion(ctx, u)})
		}
	}
	prog.note("measuring the environment")
	rep.Env = measureEnvironment(absDir(dir))

	var bs []*backend
	for _, t := range targets {
		b := &backend{url: t.URL, cfg: c, res: &BackendResult{URL: redact(t.URL), Server: t.Server, Samples: map[string][]float64{}}}
		if _, err := b.lockersN(ctx, 1); err != nil {
			return nil, fmt.Errorf("%s: %w", redact(t.URL), err)
		}
		b.res.Guarantees = b.lockers[0].Guarantees()
		b.res.Backend = b.res.Guarantees.Backend
		defer b.close()
		bs = append(bs, b)
		rep.Backends = append(rep.Backends, b.res)
		rep.Env.Servers = append(rep.Env.Servers, redact(t.URL)+" → "+t.Server)
	}

	steps := planSteps(c)
	prog.total = len(steps) * c.repeat * len(bs)
	for _, st := range steps {
		for r := range c.repeat {
			for _, b := range bs {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				prog.step(fmt.Sprintf("%-8s %-22s repeat %d/%d", b.res.Backend, st.group, r+1, c.repeat))
				key := fmt.Sprintf("bench/%s/%d/%s", strings.ReplaceAll(st.group, " ", "_"), r, randHex(4))
				vals, samples, err := st.run(ctx, b, key)
				if err != nil {
					b.res.Errors = append(b.res.Errors, fmt.Sprintf("%s (repeat %d): %v", st.group, r+1, err))
					prog.note(fmt.Sprintf("%s %s: %v", b.res.Backend, st.group, err))
					continue
				}
				for _, v := range vals {
					f := b.res.figure(st.group, v.name, v.unit)
					f.Runs = append(f.Runs, v.v)
				}
				b.res.Samples[st.group] = append(b.res.Samples[st.group], samples...)
			}
		}
	}
	prog.done()
	for _, b := range bs {
		for _, f := range b.res.Figures {
			f.Stat = spread(f.Runs)
		}
	}
	rep.Env.LoadAvgEnd = loadAvg()
	rep.Elapsed = time.Since(began).Round(time.Millisecond).String()
	return rep, nil
}

// planSteps lists the measurements to run, in report order.
func planSteps(c *benchConfig) []step {
	var steps []step
	for _, m := range allMeasures {
		if !slices.Contains(c.measures, m) {
			continue
		}
		switch m {
		case "uncontended":
			steps = append(steps, step{"uncontended", func(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
				return uncontended(ctx, b, key)
			}})
		case "contended":
			for _, k := range c.workers {
				steps = append(steps, step{fmt.Sprintf("contended k=%d", k), func(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
					return contended(ctx, b, key, k)
				}})
			}
		case "manykeys":
			steps = append(steps, step{"many keys", func(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
				return manyKeys(ctx, b, key)
			}})
		case "handoff":
			for _, h := range handoffHolds {
				steps = append(steps, step{fmt.Sprintf("hand-off hold=%v", h), func(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
					return handoff(ctx, b, key, h)
				}})
			}
		case "crash":
			steps = append(steps, step{"crash", func(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
				return crash(ctx, b, key)
			}})
		}
	}
	return steps
}

// benchTTL is the TTL of measured leases: long enough not to expire during
// a measurement, short enough that a lock left by a failed step frees soon.
const benchTTL = 10 * time.Second

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func uncontended(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
	ls, err := b.lockersN(ctx, 1)
	if err != nil {
		return nil, nil, err
	}
	l := ls[0]
	var lat []float64
	begin := time.Now()
	end := begin.Add(b.cfg.duration)
	for time.Now().Before(end) || len(lat) < 3 {
		cctx, cancel := context.WithTimeout(ctx, benchTTL)
		t0 := time.Now()
		lease, err := l.TryAcquire(cctx, key, distlock.WithTTL(benchTTL))
		if err == nil {
			err = lease.Release(cctx)
		}
		cancel()
		if err != nil {
			return nil, nil, err
		}
		lat = append(lat, ms(time.Since(t0)))
	}
	el := time.Since(begin)
	return []value{
		{"p50", "ms", pct(lat, 50)}, {"p99", "ms", pct(lat, 99)}, {"p99.9", "ms", pct(lat, 99.9)},
		{"ops/s", "ops/s", float64(len(lat)) / el.Seconds()}, {"samples", "n", float64(len(lat))},
	}, lat, nil
}

func contended(ctx context.Context, b *backend, key string, k int) ([]value, []float64, error) {
	ls, err := b.lockersN(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	begin := time.Now()
	actx, cancel := context.WithDeadline(ctx, begin.Add(b.cfg.duration))
	defer cancel()
	counts := make([]int, k)
	waits := make([][]float64, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			for actx.Err() == nil {
				t0 := time.Now()
				lease, err := ls[i].Acquire(actx, key, distlock.WithTTL(benchTTL))
				if err != nil {
					if actx.Err() == nil {
						errs[i] = err
					}
					return
				}
				waits[i] = append(waits[i], ms(time.Since(t0)))
				rctx, rcancel := context.WithTimeout(ctx, benchTTL)
				err = lease.Release(rctx)
				rcancel()
				if err != nil {
					errs[i] = err
					return
				}
				counts[i]++
			}
		})
	}
	wg.Wait()
	el := time.Since(begin)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	all := slices.Concat(waits...)
	total := 0
	for _, n := range counts {
		total += n
	}
	return []value{
		{"ops/s", "ops/s", float64(total) / el.Seconds()},
		{"wait p50", "ms", pct(all, 50)}, {"wait p99", "ms", pct(all, 99)},
		{"min/client", "acq", float64(slices.Min(counts))}, {"max/client", "acq", float64(slices.Max(counts))},
	}, all, nil
}

func manyKeys(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
	const workers, keysEach = 8, 64
	ls, err := b.lockersN(ctx, 1)
	if err != nil {
		return nil, nil, err
	}
	l := ls[0]
	begin := time.Now()
	end := begin.Add(b.cfg.duration)
	lats := make([][]float64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				k := fmt.Sprintf("%s/w%d/%d", key, w, i%keysEach)
				cctx, cancel := context.WithTimeout(ctx, benchTTL)
				t0 := time.Now()
				lease, err := l.TryAcquire(cctx, k, distlock.WithTTL(benchTTL))
				if err == nil {
					err = lease.Release(cctx)
				}
				cancel()
				if err != nil {
					errs[w] = err
					return
				}
				lats[w] = append(lats[w], ms(time.Since(t0)))
			}
		})
	}
	wg.Wait()
	el := time.Since(begin)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	all := slices.Concat(lats...)
	return []value{
		{"ops/s", "ops/s", float64(len(all)) / el.Seconds()},
		{"p50", "ms", pct(all, 50)}, {"p99", "ms", pct(all, 99)},
	}, all, nil
}

// handoff measures release → next holder: A holds for hold while B waits in
// Acquire; the time from just before A's Release to B's Acquire returning,
// both read in this process (one monotonic clock).
func handoff(ctx context.Context, b *backend, key string, hold time.Duration) ([]value, []float64, error) {
	ls, err := b.lockersN(ctx, 2)
	if err != nil {
		return nil, nil, err
	}
	a, w := ls[0], ls[1]
	type got struct {
		lease *distlock.Lease
		at    time.Time
		err   error
	}
	var lat []float64
	end := time.Now().Add(b.cfg.duration)
	for time.Now().Before(end) || len(lat) < 3 {
		cctx, cancel := context.WithTimeout(ctx, benchTTL)
		la, err := a.Acquire(cctx, key, distlock.WithTTL(benchTTL))
		if err != nil {
			cancel()
			return nil, nil, err
		}
		ch := make(chan got, 1)
		go func() {
			lb, err := w.Acquire(cctx, key, distlock.WithTTL(benchTTL))
			ch <- got{lb, time.Now(), err}
		}()
		if hold > 0 {
			time.Sleep(hold)
		}
		released := time.Now()
		err = la.Release(cctx)
		g := <-ch
		if g.err == nil {
			err = errors.Join(err, g.lease.Release(cctx))
		}
		cancel()
		if err = errors.Join(err, g.err); err != nil {
			return nil, nil, err
		}
		lat = append(lat, ms(g.at.Sub(released)))
	}
	return []value{{"p50", "ms", pct(lat, 50)}, {"p99", "ms", pct(lat, 99)}, {"samples", "n", float64(len(lat))}}, lat, nil
}

// selfExe is the program crash runs as its holder ("distlock hold"); tests
// point it at a built binary.
var selfExe = os.Executable

// crash measures how long a key stays locked after its holder dies without
// releasing: a "distlock hold" process is SIGKILLed while a client waits.
// mem:// cannot be shared with another process, so there the holder is a
// lease in this process that is abandoned right after a refresh.
func crash(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
	ttl := b.cfg.crashTTL
	ls, err := b.lockersN(ctx, 2)
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*ttl+30*time.Second)
	defer cancel()

	var crashNow func() error
	if strings.HasPrefix(b.url, "mem:") {
		lease, err := ls[0].Acquire(wctx, key, distlock.WithTTL(ttl))
		if err != nil {
			return nil, nil, err
		}
		crashNow = func() error { return lease.Refresh(wctx) } // its last sign of life
	} else {
		kill, err := startHolder(wctx, b.url, key, ttl)
		if err != nil {
			return nil, nil, err
		}
		defer kill()
		crashNow = kill
	}
	type got struct {
		lease *distlock.Lease
		at    time.Time
		err   error
	}
	ch := make(chan got, 1)
	go func() {
		l, err := ls[1].Acquire(wctx, key, distlock.WithTTL(benchTTL))
		ch <- got{l, time.Now(), err}
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter start waiting
	crashed := time.Now()
	if err := crashNow(); err != nil {
		cancel()
		<-ch
		return nil, nil, fmt.Errorf("crashing the holder: %w", err)
	}
	g := <-ch
	if g.err != nil {
		return nil, nil, g.err
	}
	_ = g.lease.Release(wctx)
	free := g.at.Sub(crashed)
	return []value{{"free after", "s", free.Seconds()}, {"ttl", "s", ttl.Seconds()}}, []float64{ms(free)}, nil
}

// startHolder runs "distlock hold" on key and waits until it holds the
// lock; kill SIGKILLs it (idempotent) and reaps it.
func startHolder(ctx context.Context, rawURL, key string, ttl time.Duration) (kill func() error, err error) {
	exe, err := selfExe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "hold", "--url", rawURL, "--key", key, "--ttl", ttl.String(), "--max", "2m")
	cmd.Env = append(os.Environ(), runAsCLI+"=1")
	cmd.SysProcAttr = holderProcAttr()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var once sync.Once
	kill = func() error {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
		return nil
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.HasPrefix(l, "HELD ") {
			return kill, nil
		}
		kill()
		return nil, fmt.Errorf("holder process did not take the lock: %s", strings.TrimSpace(stderr.String()))
	case <-ctx.Done():
		kill()
		return nil, fmt.Errorf("holder process: %w", ctx.Err())
	}
}

// runAsCLI, set in a test binary's environment, makes it run the CLI
// instead of the tests (see TestMain), so selfExe works under go test.
const runAsCLI = "DISTLOCK_TEST_RUN_AS_CLI"

// pct returns the p-th percentile (nearest rank) of xs.
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func spread(runs []float64) Stat {
	if len(runs) == 0 {
		return Stat{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{s[0], m, s[len(s)-1]}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redact hides a password in a URL for reports.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}
