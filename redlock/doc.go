// Package redlock is the Redlock backend of distlock: one lock over N
// independent Redis nodes (N odd, at least 3), held while a majority
// (quorum N/2+1) of them hold it. It serves "redlock://" URLs for
// distlock.Open and runs, on each node, the scripts and the key layout of
// the single-Redis backend (package redis), which the two packages share
// through an internal package; [distlock.Lease.As] with a *[redis.Keys]
// gives a lease's key names.
//
//	redlock://r1:6379,r2:6379,r3:6379/0
//	redlock://app@r1:6380,r2:6380,r3:6380/0?tls=true&ca_file=/ca.pem&cert_file=/c.pem&key_file=/c-key.pem&password_file=/run/secrets/redis
//
// An acquire sends the acquire script (SET NX PX ttl and the node's token
// counter advanced) to every node in parallel, each call bounded by the
// node timeout ([WithNodeTimeout]), and goes on once a quorum said yes.
// The token is the maximum of the acquired quorum's counters; a second
// phase raises the counter to that token on those nodes while the lock is
// still ours, and the acquire succeeds only if a majority accepted it
// within the lease's validity (TTL − elapsed − drift, distlock.WithDrift).
// No other Redlock library offers fencing tokens; this second phase is what
// makes them increase, since any later majority meets this one.
//
// Guarantees and their conditions:
//   - Mutual exclusion needs bounded clock drift (each node expires the
//     lock by its own clock) and nodes that do not lose a held lock: run
//     them with appendfsync always, or keep a crashed node down for at
//     least the longest TTL in use. ⌊(N−1)/2⌋ node failures are tolerated.
//   - Tokens strictly increase across holders as long as node clocks
//     differ by less than the time a restarted node was down, and by less
//     than an hour; a node that lost its counter seeds it from its clock.
//     A token still protects a resource that checks it when a clock jump
//     frees a lock early on one node.
//   - A lease decided by exactly a majority survives the loss of one node
//     of it: Refresh takes the lock back where it is missing, but only
//     while a majority held it without a break; otherwise the lease is
//     reported lost.
//   - A request that lands late or twice changes nothing that a later
//     one decided, for 5 s (refresh numbers, release tombstones, refused
//     attempts remembered); one held up longer can set the lock on one
//     node, a minority, until its TTL.
//   - Waiters are woken by release notices, not in FIFO order. A
//     maxmemory-policy of allkeys-* could evict the counters.
//
// Inspect reads every node and reports a holder only when a majority hold
// the lock for one owner and have its holder record; it fails with
// [ErrNoQuorum] when the silent nodes could change the verdict. Waiters is
// -1. There is no server-side watch: Locker.Watch wakes on release notices
// and polls.
//
// A server given twice would count twice toward the quorum, so Open and
// New refuse it. Clients should set ContextTimeoutEnabled; this backend
// also stops waiting for a node after the node timeout. go-redis's log
// lines, for the clients distlock.Open dials, go to distlock.WithLogger or
// nowhere (see package redis).
//
// Each node needs the ACL of package redis's lock user. When refusals alone
// (a wrong password, a rejected certificate, a NOPERM) leave no majority,
// calls fail with distlock.ErrAccessDenied, not ErrNoQuorum.
//
// See docs/backends/redlock.md for the algorithm step by step, why the
// tokens increase, the assumptions and what Inspect reports, and
// docs/security-redis.md for the ACL and what the key pattern protects.
package redlock
