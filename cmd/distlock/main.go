// Command distlock runs a command under a distributed lock, and measures and
// compares the lock backends of github.com/distlock/distlock.
//
// Usage:
//
//	distlock run [flags] -- COMMAND [ARG...]   run COMMAND while holding a lock
//	distlock bench [flags]                     measure backends (latency, contention, hand-off, crash)
//	distlock compare [flags]                   bench, plus each backend's declared guarantees and fault-matrix rows, in one report
//	distlock fence [flags] -- SQL              inside `distlock run`: run SQL guarded by the job's fencing token
//	distlock version                           print the version (also --version)
//	distlock help [COMMAND]
//
// The backend is chosen by URL (mem://, redis://host:port, redlock://h1,h2,h3,
// etcd://host:port, zk://host:port/path): every backend registered by
// github.com/distlock/distlock/all is available. `distlock run` reads the
// URL from --url, else $DISTLOCK_URL; with neither it stops with a usage
// error rather than lock nothing across processes (mem:// is in-process
// only: ask for it explicitly with --url mem://).
//
// Exit status. One table serves every subcommand; the codes are
// sysexits.h's where one fits:
//
//	0   success (run: the command's own status, 128+N if killed by signal N)
//	1   bench/compare: a measurement failed; fence: the SQL statement failed
//	64  usage error (bad flag, no or bad URL, no command, fence: DISTLOCK_* unset)
//	65  fence: the write was refused, the token is stale (EX_DATAERR)
//	69  the backend (or fence's database) could not be reached or failed
//	70  run: the lease was lost while the command ran; the command was signalled
//	75  run: the lock was not acquired (-n/--wait 0: held; --wait D: D ran out)
//	77  the backend refused the credentials or a permission (EX_NOPERM)
//	126 run: the command is not executable; 127 it was not found (both
//	    checked before the backend is contacted)
//
// `distlock --version` (or `distlock version`) prints distlock's module
// version, or "(devel)" with the VCS revision for a build from a checkout,
// and the Go version.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	flag "github.com/spf13/pflag"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all"
)

// Exit codes of distlock itself (see the package doc); sysexits.h where one fits.
const (
	exitOK          = 0
	exitFailure     = 1  // a bench/compare measurement, or fence's SQL, failed
	exitUsage       = 64 // EX_USAGE
	exitStale       = 65 // EX_DATAERR: fence refused a stale token
	exitUnavailable = 69 // EX_UNAVAILABLE: backend unreachable or failing
	exitLeaseLost   = 70 // EX_SOFTWARE: the lease was lost under the command
	exitNotAcquired = 75 // EX_TEMPFAIL: held (-n) or --wait ran out; try again later
	exitNoPerm      = 77 // EX_NOPERM: the backend refused the credentials or a permission
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
		{name: "fence", summary: "inside `distlock run`: run SQL in a transaction guarded by the job's fencing token", run: cmdFence},
		{name: "dev-servers", summary: "start every backend's server on loopback for trying the library; prints their URLs", run: cmdDevServers},
		{name: "version", summary: "print distlock's version and the Go version it was built with", run: cmdVersion},
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
	case "--version", "-version":
		return cmdVersion(ctx, args[1:], s)
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
			fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, `
Run "distlock COMMAND --help" for a command's flags; "distlock --version" for the version.
Backends are chosen by URL; registered schemes: `+strings.Join(schemes(), ", ")+`
`)
}

// flagSet is a subcommand's flags and the help text printed above them.
type flagSet struct {
	*flag.FlagSet
	head string
}

// newFlags returns a FlagSet for a subcommand: GNU-style --long flags (and
// a few one-letter shorthands), parsed up to the first argument that is not
// a flag, with -h/--help and a usage text of head followed by the flags.
func newFlags(name, head string, s stdio) *flagSet {
	fs := flag.NewFlagSet("distlock "+name, flag.ContinueOnError)
	fs.SetOutput(s.err)
	fs.SortFlags = false         // declaration order: the important ones first
	fs.SetInterspersed(false)    // `run --key k cmd --flag`: --flag is cmd's
	fs.SetNormalizeFunc(aliases) // --q, the old spelling of --quiet
	// No -h shorthand: pflag answers an unknown -h (and so -help) with
	// ErrHelp, which a defined -h would turn into "unknown shorthand 'e'".
	fs.Bool("help", false, "show this help")
	fs.Usage = func() {} // pflag calls it before returning ErrHelp: parseFlags prints the help itself
	return &flagSet{fs, strings.TrimLeft(head, "\n")}
}

// printHelp writes the help text and the flags to w: one flag a row,
// "--name type" (no type for a switch), the usage wrapped in a column, and
// the default once, when it is not the type's zero value.
func (fs *flagSet) printHelp(w io.Writer) {
	fmt.Fprint(w, fs.head)
	fmt.Fprintln(w, "\nFlags:")
	type row struct{ left, usage string }
	var rows []row
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		if f.Hidden {
			return
		}
		left := "      --" + f.Name
		if f.Name == "help" {
			left = "  -h, --help"
		} else if f.Shorthand != "" {
			left = "  -" + f.Shorthand + ", --" + f.Name
		}
		typ, usage := flag.UnquoteUsage(f) // "" for a switch
		if typ != "" {
			left += " " + typ
		}
		switch def := f.DefValue; {
		case def == "" || def == "false" || def == "0" || def == "0s":
		case f.Value.Type() == "string":
			usage += fmt.Sprintf(" (default %q)", def)
		default:
			usage += " (default " + def + ")"
		}
		rows = append(rows, row{left, usage})
		width = max(width, len(left))
	})
	const lineWidth = 80
	for _, r := range rows {
		line := fmt.Sprintf("%-*s", width+2, r.left)
		for i, word := range strings.Fields(r.usage) {
			if i > 0 && len(line)+1+len(word) > lineWidth {
				fmt.Fprintln(w, line)
				line = strings.Repeat(" ", width+2)
			}
			line += " " + word
		}
		fmt.Fprintln(w, line)
	}
}

// aliases maps flag names kept for compatibility to the documented ones.
func aliases(_ *flag.FlagSet, name string) flag.NormalizedName {
	if name == "q" {
		name = "quiet"
	}
	return flag.NormalizedName(name)
}

// parseFlags parses args; ok is false when the command must return code
// (0 after --help, exitUsage after a bad flag).
func parseFlags(fs *flagSet, args []string, s stdio) (code int, ok bool) {
	name := strings.TrimPrefix(fs.Name(), "distlock ")
	err := fs.Parse(args)
	if help, _ := fs.GetBool("help"); help || errors.Is(err, flag.ErrHelp) {
		fs.printHelp(s.out) // asked for: not an error
		return exitOK, false
	}
	if err != nil {
		msg := err.Error()
		// -url (one dash) reads as the shorthands -u -r -l: point at --url.
		var nx *flag.NotExistError
		if errors.As(err, &nx) {
			long, _, _ := strings.Cut(nx.GetSpecifiedShortnames(), "=")
			if long != "" && fs.Lookup(long) != nil {
				msg += fmt.Sprintf(" (did you mean --%s?)", long)
			}
		}
		return usageError(s, name, "%s", msg), false
	}
	return 0, true
}

// usageError prints a usage error for the command and returns exitUsage.
func usageError(s stdio, cmd, format string, args ...any) int {
	fmt.Fprintf(s.err, "distlock %s: %s\nRun \"distlock %s --help\" for usage.\n", cmd, fmt.Sprintf(format, args...), cmd)
	return exitUsage
}

// exitCode maps an error to the exit-code table shared by every
// subcommand (see the package doc); fallback is the code of an error none
// of the library's classes matches.
func exitCode(err error, fallback int) int {
	switch {
	case errors.Is(err, distlock.ErrInvalid):
		return exitUsage
	case errors.Is(err, distlock.ErrAccessDenied):
		return exitNoPerm
	case errors.Is(err, distlock.ErrUnavailable), errors.Is(err, errOpenSlow):
		return exitUnavailable
	}
	return fallback
}

// errText is err's message without the "distlock: " the library's errors
// begin with (wrapped ones may repeat it inside), for a line that already
// begins with "distlock COMMAND: ".
func errText(err error) string {
	msg := strings.TrimPrefix(err.Error(), "distlock: ")
	return strings.ReplaceAll(msg, ": distlock: ", ": ")
}
