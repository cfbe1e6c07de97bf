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
// lock back where it is missing). [KeysFor] gives the layout every script
// uses, and [NewNotifier] the release notices of one node.
//
// It is internal so that package redis exports only its user API; the one
// type users see is [Keys], as redis.Keys, the target of Lease.As.
package redisnode
