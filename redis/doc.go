// Package redis is the single-Redis backend of distlock, on go-redis v9: a
// plain client, a Sentinel failover client and a Cluster client all work
// (anything that is a goredis.UniversalClient). It serves "redis://" and
// "rediss://" URLs for distlock.Open.
//
// # How it works
//
// Acquire is one round trip: a Lua script runs SET lock owner NX PX ttl and,
// only if that succeeded, advances a per-key counter that never expires to
// max(counter + 1, the server's TIME in microseconds); the counter is the
// fencing token. When the key is held the script returns the holder's PTTL
// instead, which bounds the fallback poll of a waiter. Refresh (PEXPIRE) and
// release (DEL, then PUBLISH a release notice) are Lua scripts that first
// compare the stored owner value, a random 128-bit value unique to each
// acquire attempt. Scripts are called with EVALSHA and fall back to EVAL on
// NOSCRIPT (after SCRIPT FLUSH, a restart or a failover).
//
// Waiters are woken by the release's PUBLISH, through one shared pub/sub
// connection per Locker, opened at the first wait; a notice that is lost
// only delays a waiter until the holder's TTL runs out (at most 5s between
// polls).
//
// # Key layout
//
// With the default prefix "distlock:", key "orders/42" uses
//
//	distlock:{orders/42}            the lock: owner value, PX expiry
//	distlock:{orders/42}:token      the token counter, no expiry
//	distlock:{orders/42}:released   the pub/sub channel of release notices
//
// The braces are a Cluster hash tag: lock and counter share a slot, so the
// acquire script may touch both. Inside the tag "%" and "}" are escaped
// ("%25", "%7D"), so distinct keys stay distinct. Set the prefix with
// [WithKeyPrefix]; [distlock.Lease.As] with a *[Keys] gives a lease's key
// names. Short-lived tombstones (distlock:{orders/42}:gone:<owner value>)
// keep a late retry of a released attempt from taking the lock again.
//
// # Guarantees
//
// Mutual exclusion holds while the one Redis server keeps its data. It does
// not survive a failover to a replica that had not received the latest
// writes, nor a restart that loses writes (anything short of appendonly with
// appendfsync always): a held lock can then be lost, and a second client
// can acquire while the first still believes it holds the key.
//
// Fencing tokens strictly increase across those events too, under one
// assumption: the clocks of the servers that serve a key (a master and the
// replicas that may replace it) differ by less than a restart or failover
// takes, and do not step back across it. A restarted server that lost the
// counter, or a promoted replica whose counter lags, seeds the next token
// from its clock in microseconds, which is past every token handed out
// before. So a guarded resource (package fencing) still refuses the writes
// of a holder whose lock was lost that way. [WithWaitReplicas] narrows the
// failover window by running WAIT after each acquire and refresh (WAIT does
// not make Redis strongly consistent). A maxmemory-policy of allkeys-* can
// evict the token counter; the next token then still comes from the clock,
// but the backend checks the policy when it starts and warns, or refuses
// with [WithEvictionCheck]. volatile-* policies can evict held locks early.
// Locks are not FIFO: any waiter may win after a release.
//
// # Shared with Redlock
//
// The scripts, the key layout and the release notifier are shared with
// package redlock, which runs them on each of its nodes, so a Redlock and
// a single-Redis Locker with the same prefix use the same keys. They live
// in an internal package: this package exports only its user API, and
// [Keys] is an alias of the layout type they share, so that Lease.As fills
// in a redis.Keys for a lease of either backend.
//
// Clients should set ContextTimeoutEnabled so that context deadlines bound
// socket reads and writes; URLs opened with distlock.Open do.
//
// # Logging
//
// The backend logs only to the logger given with distlock.WithLogger.
// go-redis has one logger for the whole process (goredis.SetLogger), on
// stderr by default: while a Locker from distlock.Open is open, distlock
// installs a logger there that sends go-redis's lines to the WithLogger
// loggers of such Lockers, or drops them if none has one. A client passed
// to New is the caller's, and go-redis's logger is left alone.
package redis
