// Package fencing makes PostgreSQL reject the writes of a lock holder whose
// lock has already passed to someone else.
//
// A distlock lease can end without its holder knowing — a GC pause, a slow
// network or a clock jump can outlast the TTL — and the holder may then write
// after the next holder did. Every lease carries a fencing token that
// strictly increases per key ([distlock.Lease.Token]); this package has the
// database remember the highest token it has seen for a resource and refuse
// any write that comes with a lower one, returning an error that matches
// [ErrStaleToken]. The check and the write commit in one transaction, so a
// rejected holder changes nothing. It works with the tokens of every distlock
// backend, since all of them only promise "larger than every earlier holder's".
//
// # Two forms
//
// The fence table: one row per guarded resource with the highest token seen.
// Create it with [Migrate] (or [Table.Create] for another name), or with this
// DDL:
//
//	CREATE TABLE IF NOT EXISTS distlock_fence (
//	    resource text   PRIMARY KEY,
//	    token    bigint NOT NULL
//	);
//
// [Guard], called as the first statement of the caller's transaction, runs
// one upsert:
//
//	INSERT INTO distlock_fence AS f (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = excluded.token
//	WHERE f.token <= excluded.token
//	RETURNING token
//
// No row back means a larger token is stored: the caller is stale. An equal
// token is accepted, so one holder may write many times. The upsert keeps the
// fence row locked until the transaction ends, so guarded transactions on one
// resource run one after another. [WithGuard] wraps it all: begin, guard, run
// the caller's function, commit only if everything held.
//
// The token column, for hot rows: the row being written carries its own fence
// column (bigint NOT NULL DEFAULT 0), and [UpdateRow] writes it with
//
//	UPDATE t SET ..., fence = $token WHERE <key> AND fence <= $token
//
// Zero rows updated means stale (or no such row: see [ErrRowNotFound]). It
// costs no extra statement and no extra row, at the price of a column.
//
// # The rule: fence first, then read
//
// A fence protects a read-modify-write only if the fence is raised before the
// read: read inside the guarded transaction, after Guard, or claim the fence
// right after acquiring the lock (Guard in a transaction of its own, or
// [UpdateRow] with no columns to set). A fence checked only at write time
// still loses an update:
//
//	A (token 33)                 B (token 34)                 row
//	acquires the lock
//	GC pause; the lease expires
//	                             acquires the lock
//	                             reads balance 100             100, fence 32
//	wakes, writes 100+10         (32 <= 33: accepted)          110, fence 33
//	                             writes 100+50 (33 <= 34: ok)  150, fence 34
//
// Both writes passed the check and A's +10 is gone: B read before A wrote.
// Had B raised the fence to 34 before reading, A's write would have been
// refused and B would have read 100 and written 150, correctly.
//
// Inside a guarded transaction under READ COMMITTED (PostgreSQL's default and
// what [WithGuard] uses) every statement after Guard sees the commits of all
// earlier guarded transactions on the resource, because Guard waited for
// them. Under REPEATABLE READ or SERIALIZABLE a guard that waited raises a
// serialization failure instead; retry the transaction.
//
// # What it guarantees and what it does not
//
// It guarantees that once a transaction guarded with token T has committed,
// no transaction guarded with a smaller token commits a guarded write to that
// resource, and that guarded transactions on one resource serialise. It does
// not make the lock exclusive (a stale holder can still run code, it just
// cannot commit guarded writes), it does not guard writes that skip the guard
// or touch data of another resource, and it is only as good as the tokens:
// a backend that can repeat tokens after a failover (see each backend's
// Guarantees) weakens it. Fence rows are never deleted by this package; a
// deleted row resets its resource's fence.
package fencing
