// Package redisnode holds the Redis node primitives shared by the redis and
// redlock backends: the Lua scripts, the key layout, and the release-notice
// Notifier. Each function runs one script in one round trip on one node;
// nothing here retries, validates input or keeps state between calls except
// the Notifier's pub/sub connection.
//
// The scripts are embedded from lua/ and sent with EVALSHA, falling back to
// EVAL on NOSCRIPT. [AcquireOn], [RefreshOn] and [ReleaseOn] are what the
// single-Redis backend runs; Redlock runs them on each of its nodes, plus
// [RaiseTokenOn] (its phase 2: raise the counter to at least T, only while
// the lock still holds owner O) and [ExtendOn] (a refresh that takes the
// lock back where it is missing). [InspectOn] reads a lock without writing
// anything. [KeysFor] gives the layout every script uses, and
// [NewNotifier] the release notices of one node.
//
// The holder record (Keys.Holder, a hash of owner, token and value) is what
// Inspect reports beyond the lock itself. It is written only while its
// owner holds the lock (by an acquire given a value, by Redlock's phase 2,
// by Redlock's refresh where it is missing), lasts as long as the lock
// (extended with it, deleted by its release, else expiring with it), and
// is read only together with the lock and only when its owner field equals
// the lock's value: a record of an earlier holder, left to expire, is
// never taken for the current holder's.
//
// It is internal so that package redis exports only its user API; the one
// type users see is [Keys], as redis.Keys, the target of Lease.As.
package redisnode
