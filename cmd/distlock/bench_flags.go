package main

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
	"github.com/distlock/distlock/driver/urlparam"
)

const benchHelp = `
Usage: distlock bench [flags]

Measures each backend URL given with --url (repeatable), or, with none,
every registered backend on local servers it starts from the installed
binaries (mem://; redis://, redlock:// on 5 nodes, etcd://, zk://, postgres://
when those backends are registered and redis-server, etcd, java+ZooKeeper,
PostgreSQL are installed).

Measurements, each run for --duration and repeated --repeat times, the
backends side by side (every backend's repeat i runs before any repeat i+1):
  uncontended   acquire+release on one key by one client: p50/p99/p99.9, ops/s
  contended     k clients on one key (--workers): throughput, wait p99,
                fewest/most acquisitions of one client (fairness)
  manykeys      8 goroutines on one Locker over 512 distinct keys
  handoff       release → next holder acquired (one monotonic clock),
                at hold times 0, 5 and 50 ms (at 0 the next client may not
                be waiting yet: then it is its first attempt on a free key)
  observe       observer latency of an election (package election): two
                clients hand leadership over again and again while a third
                observes; new leader's Campaign returning → observer told,
                and old leader's Resign → observer told (one monotonic clock)
  crash         a holder process is SIGKILLed (no release, no renewal):
                time until a waiting client acquires (in-process for mem://)

Figures are reported as the median over repeats with min..max beside it,
so the noise of the machine shows.

Exit status (the table "distlock run" uses): 0 every step measured; 1 a
measurement failed (the report is still written, naming it); 64 usage
error; 69 a backend unreachable or failing; 77 a backend refused the
credentials or a permission.
`

// benchConfig is bench's (and compare's) flags.
type benchConfig struct {
	urls     []string
	duration time.Duration
	repeat   int
	workers  []int
	measures []string
	held     int // leases of the held measurement
	crashTTL time.Duration
	jsonPath string
	htmlPath string
	textPath string
	dir      string
	quiet    bool
	// cpuProfile, when set, is where a CPU profile of the run goes.
	cpuProfile string
	// faultsPath is compare's --faults file; "" means defaultFaults if it exists.
	faultsPath string
	// soakPath is compare's --soak file; "" means defaultSoak if it exists.
	soakPath string
}

var allMeasures = []string{"uncontended", "contended", "manykeys", "handoff", "observe", "crash", "held"}

// defaultMeasures leave out held, which takes a minute or more per backend.
var defaultMeasures = []string{"uncontended", "contended", "manykeys", "handoff", "observe", "crash"}

// handoffHolds are the hold times of the hand-off measurement.
var handoffHolds = []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond}

// urlList is a repeatable --url flag.
type urlList []string

func (u *urlList) String() string     { return strings.Join(*u, ",") }
func (u *urlList) Set(s string) error { *u = append(*u, s); return nil }
func (u *urlList) Type() string       { return "URL" }

// intList is a comma-separated list of positive integers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Type() string { return "ints" }

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
func (l *strList) Type() string   { return "list" }
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
	c := &benchConfig{workers: []int{2, 8, 32}, measures: slices.Clone(defaultMeasures)}
	fs := newFlags(name, help, s)
	fs.Var((*urlList)(&c.urls), "url", "backend URL to measure (repeatable); none: start local servers for every registered backend")
	fs.DurationVar(&c.duration, "duration", 500*time.Millisecond, "length of each timed measurement")
	fs.IntVar(&c.repeat, "repeat", 3, "repeats of each measurement (min/median/max are reported)")
	fs.Var((*intList)(&c.workers), "workers", "client counts of the contended measurement, comma-separated")
	fs.Var((*strList)(&c.measures), "measure", "measurements to run, comma-separated ("+strings.Join(allMeasures, ",")+"; held is not run by default)")
	fs.IntVar(&c.held, "held", 10000, "auto-renewing leases one process holds in the held measurement")
	fs.DurationVar(&c.crashTTL, "crash-ttl", 2*time.Second, "lease TTL of the crashed holder")
	fs.StringVar(&c.jsonPath, "json", "", "write the results as JSON to `FILE`")
	fs.StringVar(&c.htmlPath, "html", "", "write a self-contained HTML report with charts to `FILE`")
	fs.StringVar(&c.textPath, "text", "", "also write the text table to `FILE`")
	fs.StringVar(&c.dir, "dir", "", "`DIR` for local servers' data and the fsync probe (default: the system temp dir)")
	fs.BoolVarP(&c.quiet, "quiet", "q", false, "no progress on stderr")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of this process to `FILE` (for finding where a figure goes)")
	_ = fs.MarkHidden("cpuprofile")
	if name == "compare" {
		fs.StringVar(&c.faultsPath, "faults", "", "fault-matrix JSON `FILE` to include (written by: "+matrixfile.Command(defaultFaults)+"); default "+defaultFaults+" if it exists")
		fs.StringVar(&c.soakPath, "soak", "", "randomized-fault soak JSON `FILE` to include (written by make soak); default "+defaultSoak+" if it exists")
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
	if err != nil || urlparam.MisreadUserinfo(u) {
		return fmt.Errorf("--url %q: malformed (percent-encode '/', '?', '#' and '@' in a password)", urlparam.Redact(raw))
	}
	if !registered(u.Scheme) {
		return fmt.Errorf("--url %q: unknown scheme %q (registered: %s)", urlparam.Redact(raw), u.Scheme, strings.Join(schemes(), ", "))
	}
	return nil
}
