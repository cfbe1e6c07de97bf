// Package readme_test holds the README's "Fifteen lines": this file's import
// block and the body of the function literal in Example (less two tabs of
// indentation) are the README's snippet, byte for byte, which
// TestREADMESnippet checks; so the snippet compiles as shown, and
// TestExampleRuns runs it. The setup around it is in readme_test.go.
package readme_test

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
	_ "github.com/distlock/distlock/redis" // registers redis://; see "Which backend?" for the others
)

// Example writes the nightly report under a lock named by $DISTLOCK_URL,
// fenced in the PostgreSQL of $DATABASE_URL.
func Example() {
	ctx := context.Background()
	pool := connect(ctx) // a *pgxpool.Pool on $DATABASE_URL
	defer pool.Close()
	done(func() error {
		locker, err := distlock.Open(ctx, os.Getenv("DISTLOCK_URL")) // e.g. redis://127.0.0.1:6379; unset: ErrInvalidURL
		if err != nil {
			return err
		}
		defer locker.Close()
		if err := fencing.Migrate(ctx, pool); err != nil { // once, at startup: creates the fence table
			return err
		}

		return locker.Do(ctx, "nightly-report", func(ctx context.Context, lease *distlock.Lease) error {
			// ctx is cancelled the moment the lock is lost; the lease is renewed meanwhile.
			return fencing.WithGuard(ctx, pool, "report", lease.Fence(), func(tx pgx.Tx) error {
				return writeReport(ctx, tx) // PostgreSQL refuses this if a newer holder wrote first
			})
		}, distlock.WithTTL(15*time.Second))
	}())
}
