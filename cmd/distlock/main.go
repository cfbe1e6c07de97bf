// Command distlock runs a command under a distributed lock, and measures and
// compares the lock backends of github.com/distlock/distlock.
//
// Usage:
//
//	distlock run [flags] -- COMMAND [ARG...]   run COMMAND while holding a lock
//	distlock bench [flags]                     measure backends (latency, contention, hand-off, crash)
//	distlock compare [flags]                   bench, plus each backend's declared guarantees and fault-matrix rows, in one report
//	distlock help [COMMAND]
//
// The backend is chosen by URL (mem://, redis://host:port, redlock://h1,h2,h3,
// etcd://host:port, zk://host:port/path): every backend registered by
// github.com/distlock/distlock/all is available. `distlock run` reads the
// URL from --url, else $DISTLOCK_URL, else uses mem:// (one process only).
//
// Exit status of `distlock run`: the command's own status (128+N when it was
// killed by signal N), or one of distlock's codes:
//
//	64  usage error (bad flag, bad URL, no command)
//	69  the backend could not be reached or failed
//	70  the lease was lost while the command ran; the command was signalled
//	75  the lock was not acquired within --wait
//	126 the command could not be started; 127 it was not found
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	_ "github.com/distlock/distlock/all"
)

// Exit codes of distlock itself (see the package doc); sysexits.h where one fits.
const (
	exitOK          = 0
	exitFailure     = 1  // bench/compare failed
	exitUsage       = 64 // EX_USAGE
	exitUnavailable = 69 // EX_UNAVAILABLE: backend unreachable or failing
	exitLeaseLost   = 70 // EX_SOFTWARE: the lease was lost under the command
	exitNotAcquired = 75 // EX_TEMPFAIL: --wait ran out; try again later
	exitCannotExec  = 126
	exitNotFound    = 127
)

func main() {
	os.Exit(cli(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// stdio is where a command reads and writes.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// command is one subcommand.
type command struct {
	name, summary string
	hidden        bool
	run           func(ctx context.Context, args []string, io stdio) int
}

func commands() []command {
	return []command{
		{name: "run", summary: "run a command while holding a lock (like flock(1))", run: cmdRun},
		{name: "bench", summary: "measure lock backends: latency, contention, hand-off, crash recovery", run: cmdBench},
		{name: "compare", summary: "bench plus each backend's declared guarantees and fault-matrix rows, in one report", run: cmdCompare},
		{name: "hold", hidden: true, summary: "hold a lock until killed (used by bench to emulate a crashed holder)", run: cmdHold},
	}
}

// cli is main without the process: it returns the exit status, so tests can
// run it in-process.
func cli(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := stdio{stdin, stdout, stderr}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && name == "help" {
			return cli(ctx, []string{args[1], "--help"}, stdin, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, args[1:], s)
		}
	}
	fmt.Fprintf(stderr, "distlock: unknown command %q\n\n", name)
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `distlock runs a command under a distributed lock and benchmarks lock backends.

Usage:
  distlock COMMAND [flags]

Commands:
`)
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, `
Run "distlock COMMAND --help" for a command's flags.
Backends are chosen by URL; registered schemes: `+strings.Join(schemes(), ", ")+`
`)
}

// newFlags returns a FlagSet that reports errors and help to io.err, with a
// usage text of head followed by the flags.
func newFlags(name, head string, s stdio) *flag.FlagSet {
	fs := flag.NewFlagSet("distlock "+name, flag.ContinueOnError)
	fs.SetOutput(s.err)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), strings.TrimLeft(head, "\n"))
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; ok is false when the command must return code
// (0 after --help, exitUsage after a bad flag).
func parseFlags(fs *flag.FlagSet, args []string, s stdio) (code int, ok bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		// --help is not an error: print the usage to stdout.
		fs.SetOutput(s.out)
		fs.Usage()
		return exitOK, false
	}
	if err != nil {
		return exitUsage, false // the flag package has printed the error and usage
	}
	return 0, true
}

// usageError prints a usage error for the command and returns exitUsage.
func usageError(s stdio, cmd, format string, args ...any) int {
	fmt.Fprintf(s.err, "distlock %s: %s\nRun \"distlock %s --help\" for usage.\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitUsage
}
