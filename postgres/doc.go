// Package postgres is the distlock backend for PostgreSQL: locks are rows
// of a lock table, and WithLease runs a transaction that commits only while
// its lease holds.
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@db:5432/app")
//	_ = postgres.Migrate(ctx, pool) // once, as the table's owner
//	locker, _ := postgres.New(pool)
//	lease, _ := locker.Acquire(ctx, "report")
//	err := postgres.WithLease(ctx, pool, lease, func(tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "UPDATE reports SET done = true WHERE id = 7")
//		return err
//	})
//
// or distlock.Open(ctx, "postgres://app@db:5432/app?table=app.locks").
//
// What it guarantees, on one server (or a synchronous replica set):
//
//   - Mutual exclusion, judged by the database's clock alone: a lock row
//     holds an owner and an expiry, and an attempt takes it only when it is
//     free or expired. Client clocks matter only through the drift
//     allowance of the lease's local deadline.
//   - Fencing tokens rise per key: max(the key's last token + 1, the
//     database clock in microseconds). They rise across restarts, and
//     across a failover to an asynchronous replica that missed the latest
//     grants as long as the new primary's clock is past those grants'.
//   - Locks survive a restart of a durable server. A failover to an
//     asynchronous replica may drop the latest grants (Guarantees says
//     RestartLosesLocks): fence writes, or use WithLease.
//   - Lease-bound transactions (WithLease): the lock row is read FOR SHARE
//     at the start, so no new holder is granted the key while the
//     transaction runs, and the expiry is checked again before the commit,
//     so a paused holder whose lease expired commits nothing, whether or
//     not a newer holder has written. The cost is that the row lock holds
//     back the next grant and the lease's own renewal until the
//     transaction ends. For data in other databases use package fencing
//     (its Guard can run inside WithLease too).
//   - Waiting Acquires take a key in the order they came: a waiter that
//     found the key held joins a queue (the waiters table), and a free key
//     goes to the first live waiter; a release cuts every place down to
//     250 ms, so a dead waiter holds the others up that long. TryAcquire
//     takes a free key whoever waits.
//   - A waiter is woken by NOTIFY on release, through one LISTEN
//     connection per Locker outside the pool. With WithNotify(false)
//     (needed behind PgBouncer in transaction mode, where everything else
//     works) waiters poll with back-off and race: no queue.
//   - Renewal of leases falling due together is one UPDATE.
//   - A request that lands late or twice takes nothing it should not: an
//     attempt given back without an answer leaves its owner refused on the
//     row, and every statement checks owner and token.
//
// See docs/backends/postgres.md for the tables, the statements, the queue,
// the lease-bound transaction step by step and the measurements.
//
// Roles: Migrate needs CREATE on the schema; the Lockers' role needs USAGE
// on the schema, SELECT, INSERT, UPDATE on the lock table and SELECT,
// INSERT, UPDATE, DELETE on its waiters table (name + "_waiters"). A refusal of the
// role (28P01, 28000, 42501) or of the server's certificate matches
// distlock.ErrAccessDenied; a server not reached, distlock.ErrUnavailable.
package postgres
