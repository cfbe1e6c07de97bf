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
//	go run ./examples/fencing -dsn postgres://postgres@127.0.0.1:5432/postgres -url etcd://127.0.0.1:2379
//	DATABASE_URL=postgres://... DISTLOCK_URL=redis://127.0.0.1:6379 go run ./examples/fencing
//
// Flags:
//
//	-dsn  PostgreSQL URL (empty: $DATABASE_URL; with neither, it exits with
//	      status 2 and says how to start one; see README.md)
//	-url  lock backend URL (empty: $DISTLOCK_URL, else mem://, in-process,
//	      enough here as both clients run in this one process)
//	-ttl  A's lease TTL, i.e. how long before the pause costs A its lock (default 1s)
//
// It creates the distlock_fence and fencing_demo tables if missing and
// rewrites two fencing_demo rows; use a scratch database.
package main
