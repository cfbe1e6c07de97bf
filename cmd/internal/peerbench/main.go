// Command peerbench measures each distlock backend against the library a
// user would pick instead of it: redis against bsm/redislock,
// redlock against go-redsync/redsync on the same five nodes, etcd against
// client/v3/concurrency.Mutex, ZooKeeper against go-zookeeper's zk.Lock.
// The observer-latency scenario runs distlock's election on
// each backend, with etcd's concurrency.Election on the same etcd server
// as the reference (the other peers offer no election).
//
// It starts its own servers on loopback (internal/testserver), then for each
// pair and scenario alternates the two sides (distlock, peer, distlock, peer
// …), --runs times each for --duration, and prints the medians and their
// ratios. Every worker has its own client (its own connection pool, session
// or ZooKeeper connection), as separate processes would; the workers are
// goroutines of this one process.
//
//	go run ./cmd/internal/peerbench --duration 2s --runs 3 --only redis,etcd --json peers.json
//	go run ./cmd/internal/peerbench --scenarios observe --duration 5s --runs 3
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags set.
type config struct {
	duration time.Duration
	runs     int
	only     []string // pair ids; empty means all
	scens    []string // scenario ids; empty means all
	jsonPath string
	retry    string // redislock's retry strategy, see parseRetry
	dir      string // where the servers' directories go ("" = os.TempDir())
	cpuProf  string // write a CPU profile of the whole run here ("" = none)
	progress io.Writer

	observeHoldFlag    string
	observeHold        span // a leader holds a random min..max once the observer has seen it
	observeBackoffFlag string
	observeBackoff     span // the second distlock row's Observe back-off on redis, redlock (zero: no such row)
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("peerbench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	c := config{progress: stderr}
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "length of one measured run")
	fs.IntVar(&c.runs, "runs", 3, "runs per side, interleaved; the table shows medians")
	fs.StringSliceVar(&c.only, "only", nil, "pairs to measure: redis, redis-race, redlock, etcd, zk, postgres, postgres-advisory (comma-separated; default all)")
	fs.StringSliceVar(&c.scens, "scenarios", nil,
		"scenarios to run: "+strings.Join(scenarioIDs(), ", ")+" (comma-separated; default all)")
	fs.StringVar(&c.observeHoldFlag, "observe-hold", "120ms:200ms",
		"observer latency: a leader holds a random MIN:MAX once the observer has seen it, then resigns")
	fs.StringVar(&c.observeBackoffFlag, "observe-backoff", "1ms:50ms",
		"observer latency: also measure redis and redlock with the observer's WithBackoff(MIN, MAX) set to MIN:MAX (none: don't)")
	fs.StringVar(&c.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&c.retry, "redislock-retry", "linear:5ms",
		"bsm/redislock's retry strategy while waiting: linear:D or exp:MIN:MAX")
	fs.StringVar(&c.dir, "dir", "", "directory for the servers' data (default the temp dir)")
	fs.StringVar(&c.cpuProf, "cpuprofile", "", "write a CPU profile of the run (both sides, this process only) to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := c.check(); err != nil {
		fmt.Fprintln(stderr, "peerbench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if c.cpuProf != "" {
		f, err := os.Create(c.cpuProf)
		if err != nil {
			fmt.Fprintln(stderr, "peerbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "peerbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := benchmark(ctx, c)
	if rep != nil {
		printReport(stdout, rep)
		if c.jsonPath != "" {
			if werr := writeJSON(c.jsonPath, rep); werr != nil {
				fmt.Fprintln(stderr, "peerbench:", werr)
				return 1
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "peerbench:", err)
		return 1
	}
	if len(rep.Errors) > 0 {
		return 1
	}
	return 0
}

func (c *config) check() error {
	if c.duration <= 0 {
		return fmt.Errorf("--duration %v must be positive", c.duration)
	}
	if c.runs < 1 {
		return fmt.Errorf("--runs %d must be at least 1", c.runs)
	}
	for i, id := range c.only {
		id = strings.ToLower(strings.TrimSpace(id))
		if id == "zookeeper" {
			id = "zk"
		}
		if pairByID(id) == nil {
			return fmt.Errorf("--only %q: want redis, redlock, etcd or zk", id)
		}
		c.only[i] = id
	}
	for i, id := range c.scens {
		id = strings.ToLower(strings.TrimSpace(id))
		if !slices.Contains(scenarioIDs(), id) {
			return fmt.Errorf("--scenarios %q: want %s", id, strings.Join(scenarioIDs(), ", "))
		}
		c.scens[i] = id
	}
	var err error
	if c.observeHold, err = parseSpan(c.observeHoldFlag, false); err != nil {
		return fmt.Errorf("--observe-hold: %w", err)
	}
	if c.observeBackoff, err = parseSpan(c.observeBackoffFlag, true); err != nil {
		return fmt.Errorf("--observe-backoff: %w", err)
	}
	if _, err := parseRetry(c.retry); err != nil {
		return fmt.Errorf("--redislock-retry: %w", err)
	}
	return nil
}

func (c *config) wants(id string) bool {
	if len(c.only) == 0 {
		return true
	}
	for _, o := range c.only {
		if o == id {
			return true
		}
	}
	return false
}

// wantsScenario reports whether scenario id (or observeID) is to run.
func (c *config) wantsScenario(id string) bool {
	return len(c.scens) == 0 || slices.Contains(c.scens, id)
}

// scenarioIDs are the lock scenarios' ids and observeID.
func scenarioIDs() []string {
	ids := make([]string, 0, len(scenarios)+1)
	for _, sc := range scenarios {
		ids = append(ids, sc.id)
	}
	return append(ids, observeID)
}

func (c *config) note(format string, args ...any) {
	if c.progress != nil {
		fmt.Fprintf(c.progress, format+"\n", args...)
	}
}
