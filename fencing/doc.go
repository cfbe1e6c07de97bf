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
// Anything else is refused with an error that matches [ErrStaleToken]. The
// second rule keeps a backend that hands one token out twice from letting
// two holders both pass. The check and the write commit in one
// transaction, so a rejected holder changes nothing. Every guarded call
// takes a [distlock.Fence]: pass lease.Fence(). An invalid token or holder
// is [ErrInvalid].
//
// Two forms:
//   - The fence table, one row per resource: create it with [Migrate], then
//     call [Guard] as the first statement of a transaction, or let
//     [WithGuard] begin, guard, run a function and commit. Guarded
//     transactions on one resource run one after another.
//   - The token column, for hot rows: [UpdateRow] writes a row that
//     carries its own fence and holder columns, with no extra statement.
//
// Raise the fence before the read: read inside the guarded transaction,
// after Guard, or claim the fence right after acquiring the lock. A fence
// checked only at write time still loses an update.
//
// Tokens are comparable only within one deployment, so a fence compares
// (epoch, token), the epoch coming from the Locker
// ([distlock.WithFenceEpoch], URL fence_epoch=N). To move a key space to
// another backend or cluster, start the new deployment with a larger
// epoch; never lower it, and never delete a fence row.
//
// Migrate installs triggers that refuse any update lowering a fence, and
// every DELETE and TRUNCATE; they bind every role, and only the table's
// owner can lower a fence, by disabling them in that transaction.
// The runtime role needs USAGE on the schema and SELECT, INSERT, UPDATE on
// the table. A refusal by the database (28P01, 28000, 42501) or of the
// server's certificate matches [distlock.ErrAccessDenied].
//
// What it guarantees: once a transaction guarded with token T by holder H
// has committed, no transaction guarded with a smaller token, or with T by
// another holder, commits a guarded write to that resource. It does not
// make the lock exclusive, does not guard writes that skip the guard, and
// is only as good as the tokens; it assumes only the fence table's owner
// lowers a fence.
//
// See docs/fencing.md for the SQL of both forms, the upgrade of older
// tables, the epoch procedure, a worked lost update, isolation levels,
// roles and grants and the full guarantee, and docs/security.md for TLS,
// SCRAM and what a co-tenant can still do.
package fencing
