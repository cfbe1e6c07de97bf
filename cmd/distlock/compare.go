package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

var compareHelp = `
Usage: distlock compare [flags]

Runs the bench measurements (see "distlock bench --help"; same flags) and
prints each backend's declared guarantees (distlock.Guarantees) beside the
measured figures and the fault harness's rows for it (cmd/internal/faults: what
the lock, unguarded and guarded by a fencing token, did under paused,
killed and lost servers, paused holders, blackholed links), in one text
table and, with --json and --html, one JSON and one HTML report.

The fault rows come from a file the fault-matrix test writes. That test is
not part of this binary: it is a Go test in distlock's source repository
(it needs the Go toolchain, the source tree and the servers). An installed
distlock cannot run it; to get the rows, from a clone of
` + sourceRepo + ` run at its root

  ` + matrixfile.Command(defaultFaults) + `

(or make faults; add -faults.long for the long matrix). compare reads
` + defaultFaults + ` when it exists, or the file given with --faults.
Without the file the report says the rows are missing and how to get them.

The randomized-fault soak (make soak in the source repository: seeded
schedules of overlapping faults on every backend, within and beyond each
backend's declared tolerance) writes ` + defaultSoak + `; compare reads it
when it exists, or the file given with --soak, and shows per backend the
guarded operations, faults by kind, violations by rule, the worst
loss-notice delay and the worst recovery time. A --faults or --soak file
that cannot be read exits 1 before anything is measured.
`

func cmdCompare(ctx context.Context, args []string, s stdio) int {
	c, parse := benchFlags("compare", compareHelp+benchHelp, s)
	if code, ok := parse(args); !ok {
		return code
	}
	// Ctrl-C stops the run cleanly: local servers are stopped and their
	// directories removed.
	// Read the fault matrix first: a bad file should not cost a bench run.
	fm, fmPath, err := loadFaults(c)
	if err != nil {
		fmt.Fprintf(s.err, "distlock compare: %v\n", err)
		return exitFailure
	}
	soak, soakPath, err := loadSoak(c)
	if err != nil {
		fmt.Fprintf(s.err, "distlock compare: %v\n", err)
		return exitFailure
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := benchAll(ctx, c, s)
	if err != nil {
		fmt.Fprintf(s.err, "distlock compare: %v\n", err)
		return benchFailed(err)
	}
	rep.Kind = "compare"
	attachFaults(rep, fm, fmPath)
	attachSoak(rep, soak, soakPath)
	return writeReports(rep, c, s)
}
