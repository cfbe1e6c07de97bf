package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver/urlparam"
)

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
		return benchFailed(err)
	}
	rep.Kind = "bench"
	return writeReports(rep, c, s)
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
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
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
			return nil, backendError{fmt.Errorf("%s: %w", redact(t.URL), err)}
		}
		b.res.Guarantees = b.lockers[0].Guarantees()
		b.res.Backend = b.res.Guarantees.Backend
		defer b.close()
		bs = append(bs, b)
		rep.Backends = append(rep.Backends, b.res)
		rep.Env.Servers = append(rep.Env.Servers, redact(t.URL)+" → "+t.Server)
	}

	if err := measureAll(ctx, planSteps(c), bs, c.repeat, prog); err != nil {
		return nil, err
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

// measureAll runs every step repeat times on every backend, recording the
// figures and the failed steps in the backends' results; it stops only when
// ctx ends.
func measureAll(ctx context.Context, steps []step, bs []*backend, repeat int, prog *progress) error {
	prog.total = len(steps) * repeat * len(bs)
	for _, st := range steps {
		for r := range repeat {
			for _, b := range bs {
				if err := ctx.Err(); err != nil {
					return err
				}
				prog.step(fmt.Sprintf("%-8s %-22s repeat %d/%d", b.res.Backend, st.group, r+1, repeat))
				key := fmt.Sprintf("bench/%s/%d/%s", strings.ReplaceAll(st.group, " ", "_"), r, randHex(4))
				vals, samples, err := st.run(ctx, b, key)
				if err != nil {
					b.res.stepFailed(fmt.Sprintf("%s (repeat %d)", st.group, r+1), err)
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
	return nil
}

// backendError is an error of opening a backend: whatever its class, it
// is the backend failing (exit 69), not a measurement (exit 1).
type backendError struct{ err error }

func (e backendError) Error() string { return e.err.Error() }
func (e backendError) Unwrap() error { return e.err }

// benchFailed is bench's and compare's exit code for err, by the table
// run uses (see exitCode).
func benchFailed(err error) int {
	if errors.As(err, new(backendError)) {
		return openFailed(err)
	}
	return exitCode(err, exitFailure)
}

// stepFailed records a failed step: a backend that failed, or refused a
// permission, sets that exit code; anything else is a measurement failure.
func (r *BackendResult) stepFailed(what string, err error) {
	r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", what, err))
	if code := exitCode(err, exitFailure); r.exit == 0 || r.exit == exitFailure {
		r.exit = code
	}
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
		case "observe":
			steps = append(steps, step{"observer latency", observe})
		case "held":
			steps = append(steps, step{fmt.Sprintf("held n=%d", c.held), func(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
				return held(ctx, b, key, c.held, c.duration)
			}})
		case "crash":
			steps = append(steps, step{"crash", func(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
				return crash(ctx, b, key)
			}})
		}
	}
	return steps
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redact hides a password in a URL for reports.
func redact(raw string) string { return urlparam.Redact(raw) }
