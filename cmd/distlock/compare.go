package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const compareHelp = `
Usage: distlock compare [flags]

Runs the bench measurements (see "distlock bench --help"; same flags) and
prints each backend's declared guarantees (distlock.Guarantees) beside the
measured figures, in one text table and, with --html, one HTML report.
Fault-matrix rows are not included yet: the fault harness has not landed.
`

func cmdCompare(ctx context.Context, args []string, s stdio) int {
	c, parse := benchFlags("compare", compareHelp+benchHelp, s)
	if code, ok := parse(args); !ok {
		return code
	}
	// Ctrl-C stops the run cleanly: local servers are stopped and their
	// directories removed.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := benchAll(ctx, c, s)
	if err != nil {
		fmt.Fprintf(s.err, "distlock compare: %v\n", err)
		return exitFailure
	}
	rep.Kind = "compare"
	return writeReports(rep, c, s)
}
