package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/pgerr"
)

const fenceHelp = `
Usage: distlock run --key KEY -- distlock fence --dsn DSN [flags] -- SQL

Run inside a "distlock run" job: performs SQL on PostgreSQL guarded by the
job's fencing token (package fencing's fence table). In one transaction it
raises the fence of the resource (--resource, default the lock key) to the
job's token, runs SQL, and commits only if the fence accepted the token: a
job whose lock has passed to a newer holder changes nothing. SQL may hold
several statements; "-" reads it from standard input.

The fence comes from the environment "distlock run" gives its command:
DISTLOCK_TOKEN, DISTLOCK_HOLDER, DISTLOCK_KEY (unless --resource is given)
and DISTLOCK_FENCE_EPOCH (0 if unset). The fence table must exist: create
it once with --create as its owner (or fencing.Migrate; docs/fencing.md).

Exit status: 0 committed; 1 the SQL failed (nothing committed); 64 usage
error, or a DISTLOCK_* variable missing or invalid; 65 refused: the token
is stale, a newer holder has written (EX_DATAERR; nothing committed); 69
PostgreSQL unreachable or failing (the outcome of a commit cut off is
unknown); 77 PostgreSQL refused the credentials or a permission.
`

// fenceConfig is `distlock fence`'s flags.
type fenceConfig struct {
	dsn, table, resource, sql string
	create                    bool
	timeout                   time.Duration
}

func cmdFence(ctx context.Context, args []string, s stdio) int {
	var c fenceConfig
	fs := newFlags("fence", fenceHelp, s)
	fs.StringVar(&c.dsn, "dsn", "", "PostgreSQL connection `URL` (default $DATABASE_URL)")
	fs.StringVar(&c.table, "table", fencing.DefaultTable, "fence table, optionally schema-qualified (schema.table)")
	fs.StringVar(&c.resource, "resource", "", "the fenced resource (default $DISTLOCK_KEY)")
	fs.BoolVar(&c.create, "create", false, "create (or upgrade) the fence table first; needs its owner's rights")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up (exit 69) after this long")
	if code, ok := parseFlags(fs, args, s); !ok {
		return code
	}
	f, err := c.settle(fs, s.in)
	if err != nil {
		return usageError(s, "fence", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err = c.write(ctx, f)
	if err != nil {
		fmt.Fprintf(s.err, "distlock fence: %s\n", errText(err))
	}
	return fenceExit(err)
}

// errFenceUsage is the class of fence's usage errors.
var errFenceUsage = errors.New("usage")

// settle completes c from the arguments and the environment and returns
// the job's fence.
func (c *fenceConfig) settle(fs *flagSet, stdin io.Reader) (distlock.Fence, error) {
	if !fs.Changed("dsn") {
		c.dsn = os.Getenv("DATABASE_URL")
	}
	if !fs.Changed("resource") {
		c.resource = os.Getenv("DISTLOCK_KEY")
	}
	switch {
	case fs.NArg() != 1:
		return distlock.Fence{}, fmt.Errorf("%w: want one SQL argument, got %d", errFenceUsage, fs.NArg())
	case c.dsn == "":
		return distlock.Fence{}, fmt.Errorf("%w: no database: pass --dsn or set DATABASE_URL", errFenceUsage)
	case c.resource == "":
		return distlock.Fence{}, fmt.Errorf("%w: DISTLOCK_KEY is not set (run under distlock run, or pass --resource)", errFenceUsage)
	case c.timeout <= 0:
		return distlock.Fence{}, fmt.Errorf("%w: --timeout %v is not positive", errFenceUsage, c.timeout)
	}
	c.sql = fs.Arg(0)
	if c.sql == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return distlock.Fence{}, fmt.Errorf("%w: reading SQL: %w", errFenceUsage, err)
		}
		c.sql = string(b)
	}
	return fenceFromEnv(os.Getenv)
}

// fenceFromEnv reads the fence "distlock run" exports to its command.
func fenceFromEnv(getenv func(string) string) (distlock.Fence, error) {
	var f distlock.Fence
	tok, holder := getenv("DISTLOCK_TOKEN"), getenv("DISTLOCK_HOLDER")
	if tok == "" || holder == "" {
		return f, fmt.Errorf("%w: DISTLOCK_TOKEN and DISTLOCK_HOLDER must be set (run under distlock run)", errFenceUsage)
	}
	n, err := strconv.ParseInt(tok, 10, 64)
	if err != nil || n <= 0 {
		return f, fmt.Errorf("%w: DISTLOCK_TOKEN=%q is not a positive integer", errFenceUsage, tok)
	}
	f.Token, f.Holder = distlock.Token(n), holder
	if e := getenv("DISTLOCK_FENCE_EPOCH"); e != "" {
		if f.Epoch, err = strconv.ParseInt(e, 10, 64); err != nil {
			return f, fmt.Errorf("%w: DISTLOCK_FENCE_EPOCH=%q is not an integer", errFenceUsage, e)
		}
	}
	return f, nil
}

// write connects and runs c.sql guarded by f.
func (c *fenceConfig) write(ctx context.Context, f distlock.Fence) error {
	table, err := fencing.NewTable(strings.Split(c.table, ".")...)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if c.create {
		if err := table.Create(ctx, conn); err != nil {
			return err
		}
	}
	return table.WithGuard(ctx, conn, c.resource, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, c.sql)
		if err != nil {
			return fmt.Errorf("SQL: %w", err)
		}
		return nil
	})
}

// fenceExit maps fence's error to its exit code (see fenceHelp).
func fenceExit(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, fencing.ErrStaleToken):
		return exitStale
	case errors.Is(err, errFenceUsage), errors.Is(err, distlock.ErrInvalid):
		return exitUsage
	case errors.Is(err, distlock.ErrAccessDenied), pgerr.Denied(err):
		return exitNoPerm
	case pgerr.Answered(err), errors.Is(err, fencing.ErrForeignTrigger):
		return exitFailure // the server ran the SQL and refused it
	}
	return exitUnavailable // no answer: refused connection, timeout, lost connection
}
