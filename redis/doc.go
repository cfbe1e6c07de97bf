// Package redis is the single-Redis backend of distlock, on go-redis v9: a
// plain client, a Sentinel failover client and a Cluster client all work
// (anything that is a goredis.UniversalClient). It serves "redis://" and
// "rediss://" URLs for distlock.Open.
//
//	redis://host:6379/0
//	rediss://app@redis:6380/0?ca_file=/ca.pem&cert_file=/c.pem&key_file=/c-key.pem&password_file=/run/secrets/redis
//	redis://app@sentinel-1:26379/0?master_name=mymaster&addr=sentinel-2:26379&tls=true&password_file=…
//
// Acquire is one round trip: a Lua script runs SET lock owner NX PX ttl
// and, only if that succeeded, advances a per-key counter to max(counter +
// 1, the server's TIME in microseconds); the counter is the fencing token.
// Refresh and release are scripts that first compare the owner value, a
// random 128-bit value unique to each attempt. Waiters are woken by the
// release's PUBLISH, through one pub/sub connection per Locker, and poll
// at most 5 s apart should a notice be lost. With the default prefix, key
// "orders/42" lives at distlock:{orders/42} and keys beside it in the same
// Cluster slot; set the prefix with [WithKeyPrefix], and get a lease's key
// names with [distlock.Lease.As] and a *[Keys].
//
// Guarantees and their conditions:
//   - Mutual exclusion holds while the one server keeps its data and its
//     clock and the client's run at the same rate (ClockDependent). It
//     does not survive a failover to a replica that missed the latest
//     writes, nor a restart that loses writes (anything short of
//     appendonly with appendfsync always). [WithWaitReplicas] narrows the
//     failover window.
//   - Fencing tokens strictly increase across those events too, as long as
//     the clocks of the servers that serve a key differ by less than a
//     restart or failover takes and do not step back across it: a server
//     that lost the counter seeds the next token from its clock.
//   - A request that lands late or twice changes nothing for 5 s (refresh
//     numbers, release tombstones, refused attempts remembered).
//   - A maxmemory-policy of allkeys-* can evict the token counter; the
//     backend checks the policy when it starts and warns, or refuses with
//     [WithEvictionCheck]. volatile-* policies can evict held locks early.
//   - Waiting Acquires take the lock in the order they first found it held
//     (FIFO), through a queue kept next to the lock while it is contended;
//     [WithoutFairQueue] (URL fair=false) makes them race instead. Give
//     every Locker of a key the same setting.
//
// Inspect reads the key's master in one round trip: owner, PTTL, counter
// and holder record; Waiters counts the queue (-1 without it). There
// is no server-side watch: Locker.Watch wakes on release notices and
// polls. The scripts, key layout and notifier are shared with package
// redlock.
//
// A wrong password, a refused certificate or a NOPERM is
// distlock.ErrAccessDenied, never retried. Clients should set
// ContextTimeoutEnabled; URLs opened with distlock.Open do. The backend
// logs only to distlock.WithLogger; while a Locker from distlock.Open is
// open, go-redis's process-wide logger sends its lines there or drops them.
//
// See docs/backends/redis.md for the scripts, the key layout, the fair
// queue, the conditions of the guarantees, Inspect and the least-privilege
// ACL, and docs/security-redis.md for what the key pattern protects.
package redis
