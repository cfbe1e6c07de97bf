// Command fencing shows PostgreSQL refusing the write of a lock holder whose
// lease expired while it was paused.
//
// Holder A takes the lock, reads a balance and pauses past its TTL (think of
// a stop-the-world GC pause). Holder B takes the lock and deposits through a
// guarded transaction. A wakes, still believing it holds the lock, and
// writes what it computed before the pause. The fence refuses A's write
// because A's token is older than B's; the program then replays the same
// writes without the fence to show the update that would have been lost.
//
// Usage:
//
//	go run ./examples/fencing -dsn postgres://postgres@127.0.0.1:5432/postgres
//	DATABASE_URL=postgres://... go run ./examples/fencing -url mem://
//
// Flags:
//
//	-dsn  PostgreSQL URL (default $DATABASE_URL; with neither, a throwaway
//	      local PostgreSQL is started from the installed binaries)
//	-url  lock backend URL (default $DISTLOCK_URL, else mem://)
//	-ttl  A's lease TTL, i.e. how long before the pause costs A its lock (default 1s)
//
// It creates the distlock_fence and fencing_demo tables if missing and
// rewrites two fencing_demo rows; use a scratch database.
package main
