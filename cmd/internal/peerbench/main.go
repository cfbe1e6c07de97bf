// Command peerbench measures each distlock backend against the library a
// user would pick instead of it (issue #15): redis against bsm/redislock,
// redlock against go-redsync/redsync on the same five nodes, etcd against
// client/v3/concurrency.Mutex, ZooKeeper against go-zookeeper's zk.Lock.
//
// It starts its own servers on loopback (internal/testserver), then for each
// pair and scenario alternates the two sides (distlock, peer, distlock, peer
// …), --runs times each for --duration, and prints the medians and their
// ratios. Every worker has its own client (its own connection pool, session
// or ZooKeeper connection), as separate processes would; the workers are
// goroutines of this one process.
//
//	go run ./cmd/internal/peerbench --duration 2s --runs 3 --only redis,etcd --json peers.json
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	jsonPath string
	retry    string // redislock's retry strategy, see parseRetry
	dir      string // where the servers' directories go ("" = os.TempDir())
	progress io.Writer
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("peerbench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	c := config{progress: stderr}
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "length of one measured run")
	fs.IntVar(&c.runs, "runs", 3, "runs per side, interleaved; the table shows medians")
	fs.StringSliceVar(&c.only, "only", nil, "pairs to measure: redis, redlock, etcd, zk (comma-separated; default all)")
	fs.StringVar(&c.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&c.retry, "redislock-retry", "linear:5ms",
		"bsm/redislock's retry strategy while waiting: linear:D or exp:MIN:MAX")
	fs.StringVar(&c.dir, "dir", "", "directory for the servers' data (default the temp dir)")
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

func (c *config) note(format string, args ...any) {
	if c.progress != nil {
		fmt.Fprintf(c.progress, format+"\n", args...)
	}
}
