// Package fencing makes PostgreSQL reject the writes of a lock holder whose
// lock has already passed to someone else.
//
// A distlock lease can end without its holder knowing — a GC pause, a slow
// network or a clock jump can outlast the TTL — and the holder may then write
// after the next holder did. Every lease carries a fencing token that
// strictly increases per key, and an id of its holder, unique per lease
// ([distlock.Lease.Fence]). This package has the database remember, per
// resource, the highest token it has accepted and the holder that presented
// it, and accept a write only with
//
//   - a larger token, from anyone: a newer holder; or
//   - the same token from the same holder: one holder writing again.
//
// Anything else — a smaller token, or the same token from another holder —
// is refused with an error that matches [ErrStaleToken]. The second rule is
// what the holder is for: a backend that hands one token out twice (a Redis
// restart that lost its counter, say) must not let the stale holder and the
// new one both pass. The check and the write commit in one transaction, so
// a rejected holder changes nothing. It works with the tokens of every
// distlock backend, since all of them only promise "larger than every
// earlier holder's".
//
// Every guarded call takes a [distlock.Fence]: pass lease.Fence(). Where
// only values travel (a child process, a queue message), carry the token
// and the holder together. A non-positive token, or a holder that is empty,
// longer than 255 bytes or not UTF-8 text without NUL bytes, is invalid
// input ([ErrInvalid]).
//
// # Two forms
//
// The fence table: one row per guarded resource with the highest token seen
// and its holder. Create it with [Migrate] (or [Table.Create] for another
// name), or with this DDL and the statements of [Table.UpgradeDDL] (the
// triggers of "Roles and grants" below):
//
//	CREATE TABLE IF NOT EXISTS distlock_fence (
//	    resource text   PRIMARY KEY,
//	    epoch    bigint NOT NULL DEFAULT 0,
//	    token    bigint NOT NULL,
//	    holder   text
//	);
//
// A table created by an earlier version of this package lacks the holder or
// the epoch column, or the triggers; Migrate (and Table.Create), run by the
// table's owner, add them, keeping the rows (at epoch 0), safely from
// several processes at once; or run the statements [Table.UpgradeDDL]
// returns yourself. Rows without a holder accept only a larger token.
// Upgrade every writer together: an earlier version ignores the epoch.
//
// [Guard], called as the first statement of the caller's transaction, runs
// one upsert:
//
//	INSERT INTO distlock_fence AS f (resource, epoch, token, holder) VALUES ($1, $2, $3, $4)
//	ON CONFLICT (resource) DO UPDATE SET epoch = excluded.epoch, token = excluded.token, holder = excluded.holder
//	WHERE (f.epoch, f.token) < (excluded.epoch, excluded.token)
//	   OR (f.epoch = excluded.epoch AND f.token = excluded.token AND f.holder = excluded.holder)
//	RETURNING epoch, token
//
// No row back means the caller is stale: a larger token is stored, or the
// same token from another holder. A row other than the one written means a
// trigger of someone else's rewrote it ([ErrForeignTrigger]). The upsert keeps the fence row locked
// until the transaction ends, so guarded transactions on one resource run
// one after another. [WithGuard] wraps it all: begin, guard, run the
// caller's function, commit only if everything held.
//
// The token column, for hot rows: the row being written carries its own
// fence column (bigint NOT NULL DEFAULT 0) and holder column (text), and
// [UpdateRow] writes them with
//
//	UPDATE t SET ..., fence = $token, holder = $holder
//	WHERE <key> AND (fence < $token OR (fence = $token AND holder = $holder))
//
// Zero rows updated means stale (or no such row: see [ErrRowNotFound]). It
// costs no extra statement and no extra row, at the price of two columns.
// The holder column is required, for the reason the fence table keeps one:
// with the token alone an equal token cannot be told apart, and refusing
// every equal token (a strict <) would refuse a holder's own second write.
//
// # Moving to another backend: raise the fence epoch
//
// Tokens are comparable only within one deployment: Redis's are µs clock
// values, etcd's revisions and ZooKeeper's zxids start small, a new etcd
// cluster starts over. So a fence compares (epoch, token), the epoch coming
// from the Locker ([distlock.WithFenceEpoch], URL fence_epoch=N, default 0).
// To move a key space to another backend or cluster:
//
//  1. Run Migrate (or UpgradeDDL) first, so the table has the epoch column.
//     A row table written with UpdateRow needs an epoch column too, named
//     in RowUpdate.Epoch by every writer, the old deployment's included:
//     a writer that names none compares its token alone and would pass.
//  2. Start the new deployment with an epoch larger than the old one's:
//     fence_epoch=1 after 0, and so on. Never lower it.
//  3. Its first guarded write on a resource makes every fence of the old
//     epoch stale there, whatever the token: a holder of the old backend
//     still running (paused, partitioned) is refused from then on, and
//     until then it can still write, as it could before the move. Stop the
//     old deployment's writers before the first write if that window
//     matters. No fence row is deleted: deleting one is what would let a
//     stale holder through.
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
//	wakes, writes 100+10         (32 < 33: accepted)           110, fence 33
//	                             writes 100+50 (33 < 34: ok)   150, fence 34
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
// # Roles and grants
//
// The role that runs Migrate owns the fence table and needs USAGE and
// CREATE on its schema; the application's runtime role needs USAGE on the
// schema and SELECT, INSERT, UPDATE on the table, nothing more (its Migrate
// on a current table only reads the catalog):
//
//	REVOKE ALL ON SCHEMA public FROM PUBLIC;
//	GRANT USAGE, CREATE ON SCHEMA public TO fence_owner;
//	GRANT USAGE ON SCHEMA public TO app;
//	-- as fence_owner, after Migrate:
//	GRANT SELECT, INSERT, UPDATE ON distlock_fence TO app;
//
// The REVOKE matters on PostgreSQL 14 and earlier, and on clusters
// pg_upgraded from them, where PUBLIC may CREATE in public: a co-tenant
// could create distlock_fence first and own it (Migrate takes an existing
// table as it finds it; check its owner), or add operators to the
// search_path. The owner of the table's schema and the database's owner
// can drop the table, and every fence with it, so trust them as the table's
// owner: on PostgreSQL 15 public belongs to pg_database_owner, so the
// runtime role must not own the database.
//
// A role that may UPDATE the table could set a fence back by hand and let
// a stale holder through, so Migrate installs triggers that refuse any
// update lowering a row's (epoch, token) or changing its holder at an equal
// pair, and every DELETE and TRUNCATE. They bind every role; only the
// table's owner can lower a fence, by disabling the trigger
// distlock_fence_no_lowering in the transaction that lowers it (and ENABLE
// ALWAYS TRIGGER again: they fire in replica sessions too). No other
// trigger may be on the table (Migrate reports one as [ErrForeignTrigger]):
// granting TRIGGER, part of GRANT ALL, on it trusts the grantee as much as
// the owner.
//
// The database refusing the role — a wrong password (SQLSTATE 28P01), no
// pg_hba.conf entry (28000), a missing privilege (42501) — or the client
// refusing the server's certificate gives an error that matches
// [distlock.ErrAccessDenied]; errors.As still finds the *pgconn.PgError.
// The TLS and SCRAM setup, and what a co-tenant can still do, are in
// docs/security.md.
//
// # What it guarantees and what it does not
//
// It guarantees that once a transaction guarded with token T by holder H has
// committed, no transaction guarded with a smaller token, or with T by
// another holder, commits a guarded write to that resource, and that guarded
// transactions on one resource serialise. It does not make the lock
// exclusive (a stale holder can still run code, it just cannot commit
// guarded writes), it does not guard writes that skip the guard or touch
// data of another resource, and it is only as good as the tokens: a backend
// that can repeat tokens after a restart or failover (see each backend's
// Guarantees) still cannot get two holders past one fence — whichever writes
// first with a token keeps it — but the other one is refused until its
// tokens pass the stored one, even if it is the rightful holder. It assumes
// that only the fence table's owner lowers a fence (see the triggers
// above). Fence rows are never deleted by this package; a deleted row
// resets its resource's fence.
package fencing
