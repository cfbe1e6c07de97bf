package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all" // every backend's URL scheme: mem, redis, redlock, etcd, zk
	"github.com/distlock/distlock/fencing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is what the flags and environment set.
type config struct {
	dsn     string
	lockURL string
	ttl     time.Duration
}

// noDSN is the message when no PostgreSQL is named.
const noDSN = `no PostgreSQL given: pass -dsn or set DATABASE_URL, e.g.
  -dsn 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
To start a scratch PostgreSQL for it (see examples/fencing/README.md):
  docker run --rm -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres
or, from installed binaries (Debian: in /usr/lib/postgresql/<version>/bin; not as root):
  initdb -D /tmp/pgdemo -U postgres --auth=trust && pg_ctl -D /tmp/pgdemo -o '-k /tmp' -l /tmp/pgdemo.log start`

// cli parses args and the environment, runs the demo and returns the exit
// code: 0 when the fence behaved (or -h), 1 on failure, 2 on bad usage.
func cli(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.dsn, "dsn", "", "PostgreSQL connection URL; empty: $DATABASE_URL")
	fs.StringVar(&cfg.lockURL, "url", "", "lock backend URL, e.g. redis://127.0.0.1:6379, etcd://127.0.0.1:2379, zk://127.0.0.1:2181/locks;\n"+
		"empty: $DISTLOCK_URL, else mem:// (in-process: enough here, as both clients run in this process)")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "TTL of A's lease; A pauses past it")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h: the usage is printed
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fencing: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if cfg.dsn == "" {
		cfg.dsn = getenv("DATABASE_URL")
	}
	if cfg.lockURL == "" {
		cfg.lockURL = getenv("DISTLOCK_URL")
	}
	if cfg.lockURL == "" {
		cfg.lockURL = "mem://"
	}
	if cfg.ttl <= 0 || cfg.ttl > time.Minute {
		fmt.Fprintf(stderr, "fencing: -ttl %v: want between 0 and 1m\n", cfg.ttl)
		return 2
	}
	if cfg.dsn == "" {
		fmt.Fprintf(stderr, "fencing: %s\n", noDSN)
		return 2
	}
	// Bound the whole demo: a server that does not answer fails it.
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.ttl+time.Minute)
	defer cancel()
	if err := run(ctx, stdout, cfg); err != nil {
		fmt.Fprintf(stderr, "fencing: %v\n", err)
		return 1
	}
	return 0
}

const (
	account    = "fencing-demo/account-42"
	unguarded  = "fencing-demo/account-42-unguarded"
	start      = 100
	depositA   = 10
	depositB   = 50
	createDemo = `CREATE TABLE IF NOT EXISTS fencing_demo (
	account     text   PRIMARY KEY,
	balance     bigint NOT NULL,
	last_writer text   NOT NULL
)`
)

// run tells the story on the database and lock backend of cfg.
func run(ctx context.Context, w io.Writer, cfg config) error {
	pcfg, err := pgxpool.ParseConfig(cfg.dsn)
	if err != nil {
		return fmt.Errorf("bad -dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := fencing.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, createDemo); err != nil {
		return err
	}
	// The demo replays one story on every run: it resets its own rows. The
	// fence row stays, as it must: every run's tokens are larger than the
	// last run's (mem:// tokens, too, start from the wall clock).
	_, err = pool.Exec(ctx, `INSERT INTO fencing_demo VALUES ($1, $3, 'setup'), ($2, $3, 'setup')
		ON CONFLICT (account) DO UPDATE SET balance = excluded.balance, last_writer = excluded.last_writer`,
		account, unguarded, start)
	if err != nil {
		return fmt.Errorf("reset the demo rows: %w", err)
	}

	// Two clients, as two processes would have.
	clientA, err := distlock.Open(ctx, cfg.lockURL)
	if err != nil {
		return err
	}
	defer clientA.Close()
	clientB, err := distlock.Open(ctx, cfg.lockURL)
	if err != nil {
		return err
	}
	defer clientB.Close()

	fmt.Fprintf(w, "lock backend %s, database %s:%d/%s\n", cfg.lockURL, pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Database)
	fmt.Fprintf(w, "%s starts with balance %d\n\n", account, start)

	a, err := clientA.Acquire(ctx, account, distlock.WithTTL(cfg.ttl))
	if err != nil {
		return fmt.Errorf("A: acquire: %w", err)
	}
	fmt.Fprintf(w, "A: acquired the lock with token %d (TTL %v, no renewal)\n", a.Token(), cfg.ttl)
	readByA, err := balance(ctx, pool, account)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "A: read balance %d, will write %d (+%d)\n", readByA, readByA+depositA, depositA)
	fmt.Fprintf(w, "A: pauses (a stop-the-world GC, a swapped-out VM...) past its TTL\n")
	select {
	case <-a.Done():
	case <-ctx.Done():
		return fmt.Errorf("A's lease never expired: %w", ctx.Err())
	}
	fmt.Fprintf(w, "   meanwhile A's lease has expired; A, paused, does not know\n")

	b, err := clientB.Acquire(ctx, account, distlock.WithTTL(30*time.Second))
	if err != nil {
		return fmt.Errorf("B: acquire: %w", err)
	}
	// clientB.Close releases B's lease.
	fmt.Fprintf(w, "B: acquired the lock with token %d\n", b.Token())
	var readByB int64
	err = fencing.WithGuard(ctx, pool, account, b.Fence(), func(tx pgx.Tx) error {
		var err error
		if readByB, err = balance(ctx, tx, account); err != nil {
			return err
		}
		return setBalance(ctx, tx, account, readByB+depositB, "B")
	})
	if err != nil {
		return fmt.Errorf("B: guarded write: %w", err)
	}
	fmt.Fprintf(w, "B: guarded transaction: fence took token %d, read %d, wrote %d (+%d), committed\n",
		b.Token(), readByB, readByB+depositB, depositB)

	fmt.Fprintf(w, "A: wakes up, still thinks it holds the lock, writes %d with token %d\n", readByA+depositA, a.Token())
	errA := fencing.WithGuard(ctx, pool, account, a.Fence(), func(tx pgx.Tx) error {
		return setBalance(ctx, tx, account, readByA+depositA, "A")
	})
	switch {
	case errors.Is(errA, fencing.ErrStaleToken):
		fmt.Fprintf(w, "A: REJECTED: %v\n", errA)
	case errA == nil:
		return errors.New("A's stale write was accepted: the fence did not hold")
	default:
		return fmt.Errorf("A: guarded write: %w", errA)
	}

	got, writer, err := row(ctx, pool, account)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: balance %d, last written by %s\n", account, got, writer)
	if got != start+depositB || writer != "B" {
		return fmt.Errorf("want balance %d written by B, got %d by %s", start+depositB, got, writer)
	}
	fmt.Fprintf(w, "   B's deposit stands and A's stale write changed nothing\n\n")

	// The same two writes as plain UPDATEs, on the second row.
	fmt.Fprintf(w, "without the fence (plain UPDATEs on %s):\n", unguarded)
	if err := setBalance(ctx, pool, unguarded, start+depositB, "B"); err != nil {
		return err
	}
	fmt.Fprintf(w, "B writes %d, then A wakes and writes %d\n", start+depositB, start+depositA)
	if err := setBalance(ctx, pool, unguarded, start+depositA, "A"); err != nil {
		return err
	}
	got, writer, err = row(ctx, pool, unguarded)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: balance %d, last written by %s: B's +%d is lost\n", unguarded, got, writer, depositB)
	return nil
}

func balance(ctx context.Context, db fencing.DB, acct string) (int64, error) {
	n, _, err := row(ctx, db, acct)
	return n, err
}

func row(ctx context.Context, db fencing.DB, acct string) (int64, string, error) {
	var n int64
	var writer string
	err := db.QueryRow(ctx, `SELECT balance, last_writer FROM fencing_demo WHERE account = $1`, acct).Scan(&n, &writer)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", acct, err)
	}
	return n, writer, nil
}

func setBalance(ctx context.Context, db fencing.DB, acct string, n int64, writer string) error {
	_, err := db.Exec(ctx, `UPDATE fencing_demo SET balance = $2, last_writer = $3 WHERE account = $1`, acct, n, writer)
	if err != nil {
		return fmt.Errorf("write %s: %w", acct, err)
	}
	return nil
}
