// Package etcd is the distlock backend on etcd v3: a revision-ordered queue
// of lease-bound keys, the same recipe as etcd's own concurrency.Mutex, with
// a faster hand-off. It serves "etcd://host:port,host:port/" URLs, and
// "etcds://…" for TLS.
//
//	etcd://10.0.0.1:2379,10.0.0.2:2379/?prefix=app         plain
//	etcds://etcd.internal:2379/?ca_file=/ca.pem&cert_file=/app.pem&key_file=/app-key.pem
//	etcds://app@etcd.internal:2379/?ca_file=/ca.pem&password_file=/run/secrets/etcd
//
// The TLS parameters are etcdctl's flags as file paths; server_name
// overrides the host a server certificate is verified for, and
// distlock.WithTLSConfig gives a *tls.Config instead. A Locker needs
// read and write on the range prefix/ and nothing else; grant "app/", with
// the slash, since a grant of "app" covers app-billing/ too. A refused
// certificate, password or permission is distlock.ErrAccessDenied.
//
// Each attempt on key K creates prefix/K/<owner> (a random name, which the
// Locker reuses once that key is deleted), bound to an etcd lease of its
// own, with the holder's value (WithValue) as the key's value. The
// owner of K is the key with the lowest CreateRevision; the fencing token
// is that CreateRevision, a cluster-wide revision, so tokens strictly
// increase across holders of K and across restarts and leader changes.
// Waiters watch only their predecessor and acquire in the order their keys
// were created (FIFO). TryAcquire never jumps the queue. Keys are escaped
// ("%" and "/"), so keys that contain "/" do not nest; Lockers with the
// same prefix share locks, and one prefix must not sit inside another.
//
// Guarantees:
//   - Mutual exclusion and token order hold as long as etcd's linearizable
//     store does: they survive the loss of a minority of members and leader
//     elections. Mutual exclusion does not depend on clocks; a holder's
//     belief that it still holds the lock depends on its clock rate, as
//     with every lease: check tokens at the resource.
//   - A lock lives exactly as long as it is refreshed: a crashed holder's
//     lock frees when its lease runs out, after up to ceil(TTL)+1 s (or
//     the server's minimum lease TTL, 2 s with etcd's defaults).
//     Lease.Expires never exceeds the requested TTL.
//   - With WithLossWatch (the default) Lease.Done closes within a round
//     trip or two of the deletion of a lock's key (by hand, or its lease
//     revoked or expired on the server); the Locker watches the queues of
//     its own keys only, on one gRPC stream, and a member that hangs
//     delays notices by about 3 s per try.
//   - Renewal is batched (RefreshBatch): renewing thousands of locks costs
//     a few round trips, and no goroutine, per interval. An uncontended
//     acquire on a warm Locker is one round trip.
//   - An etcd leader that stalls and resumes can revoke leases the new
//     leader kept alive (etcd-io/etcd#15247), so two holders can overlap
//     until the loss notice arrives; docs/backends/etcd.md names the
//     releases that keep etcd's check intact. Fence the resource whatever
//     the server.
//
// Not guaranteed: RetryAfter in a failed TryAcquire is not filled in, and a
// waiter that cannot delete its key when its context ends (server down)
// leaves it in the queue until its lease expires.
//
// Inspect reports the queue's oldest key (its CreateRevision and value),
// the keys behind it as Waiters and its lease's remaining TTL, with
// linearizable reads. Watch is one etcd watch on the key's queue.
//
// A client given to New needs gRPC keep-alives (DialKeepAliveTime,
// DialKeepAliveTimeout) and grpc.WithConnectParams to notice a hung member
// and reconnect as quickly as the client Open makes.
//
// See docs/backends/etcd.md for how the queue, the leases and their TTL
// rounding, the loss watch and a hung member are handled, what Inspect and
// Watch report, and the server versions; and docs/security-etcd.md for the
// role with least privilege.
package etcd
