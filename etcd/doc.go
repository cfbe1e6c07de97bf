// Package etcd is the distlock backend on etcd v3: a revision-ordered queue
// of lease-bound keys, the same recipe as etcd's own concurrency.Mutex, with
// a faster hand-off. It serves "etcd://host:port,host:port/" URLs.
//
// # How a lock works
//
// Each attempt on key K creates prefix/K/<owner> (owner is random per lease)
// bound to an etcd lease, in one transaction that also reads the queue. The
// owner of K is the key with the lowest CreateRevision under prefix/K/; the
// fencing token is that CreateRevision, a cluster-wide revision, so tokens
// strictly increase across holders of K and across restarts and leader
// changes. A waiter watches only its predecessor, from the store's current
// revision, so that etcd delivers the release at once instead of from its
// 100 ms catch-up loop (which serves watches that start in the past); one to
// three re-reads of the queue in the watch's first 60 ms cover the revisions
// between the waiter's read and its watch, and a write that races the
// watch's creation. Waiters acquire in the order their keys were created
// (FIFO). A waiter whose context ends deletes its key.
// TryAcquire creates its key only if nothing (holder or waiter) is queued, so
// it never jumps the queue and leaves nothing behind when K is held.
// Release deletes the key only if its CreateRevision still matches.
//
// # Leases
//
// Every lock has an etcd lease of its own while it is held, so that a lock
// lives exactly as long as the portable layer keeps it refreshed: Refresh
// keeps the lease alive (KeepAliveOnce), and a lock that is not refreshed — or
// whose process crashed — frees on the server when its lease runs out. No
// background keep-alive runs for held locks; a Locker-wide lease kept alive by
// the client would keep a lock its holder stopped refreshing held for as long
// as the process lives. Renewal is batched instead: the locks that fall due
// together (WithAutoRenew, Do) are refreshed with one call (RefreshBatch),
// whose keep-alives go pipelined on a few lease streams (16 to a stream, the
// streams side by side) and whose ownership checks go 64 to a transaction,
// so renewing thousands of locks costs a few round trips, and no goroutine,
// per interval. Leases are recycled: a released lock's lease serves
// the next acquire with the same TTL while it still has that TTL left, so an
// uncontended acquire on a warm Locker is one round trip. A waiting Acquire
// keeps its own lease alive while it waits, and the server forgets a waiter
// whose process died within the lease TTL.
//
// etcd lease TTLs are whole seconds and at least the server's minimum (1.5 ×
// the election timeout, rounded up: 2 s with etcd's defaults). A TTL is sent
// to the server rounded up to whole seconds plus one second of headroom (so
// that recycled leases can still promise the full TTL); the server may raise
// it to its minimum. The lease's validity reported to the portable layer
// never exceeds the requested TTL, and is counted from the start of the call
// that last confirmed the lease, so Lease.Expires is honest. A lock acquired
// after a long wait may therefore report a validity somewhat below its TTL
// (never below about two thirds of it); WithAutoRenew or Do renew it anyway.
// The price of the rounding: a crashed holder's lock frees after up to
// ceil(TTL)+1 s (or the server's minimum), not after exactly TTL.
//
// # Guarantees
//
// Mutual exclusion and token order hold as long as etcd's linearizable store
// does: they survive the loss of a minority of members and leader elections
// (a new leader extends leases, never shortens them). Mutual exclusion does
// not depend on clocks; a holder's belief that it still holds the lock
// depends on its clock rate, as with every lease — check tokens at the
// resource. With WithLossWatch (the default) Lease.Done closes soon after a
// lock's key is deleted (lease revoked or expired, or key removed by hand):
// one watch on the whole prefix, made with the Locker's first lock, serves
// every lock of the Locker. Each lock is registered with it before its key
// is created, so a deletion right after the grant is not missed. A watch
// that breaks is made again from the revision after the last one it saw; if
// that revision was compacted away, or before the first watch is up, the
// keys of the locks registered meanwhile are read once the new watch is up,
// and those found deleted are reported. The watch asks its member for a
// progress notice every second and is made again after 3 s without a word,
// so a member that hangs with its connection open (or a silent network
// path) delays notices by about that much, not until it comes back.
//
// Server versions: an etcd leader that stalls (a long fsync, CPU
// starvation, SIGSTOP) and then resumes can revoke leases that the new
// leader kept alive (etcd-io/etcd#15247, fixed by #16822 on the 3.4 and 3.5
// lines). A lock is then deleted while its holder's local deadline still
// runs, and until the loss notice arrives two holders overlap; the soak
// found exactly that once on Debian's etcd 3.4.23 with a paused leader, and
// the fencing guard refused both holders' stale writes. Use a server with
// the fix, and fence the resource.
//
// Not guaranteed: RetryAfter in a failed TryAcquire is not filled in (it
// would cost a round trip); a waiter that cannot delete its key when its
// context ends (server down) leaves it in the queue until its lease expires.
//
// Keys are stored as prefix/escaped-key/owner with "%" and "/" escaped, so
// keys that contain "/" do not nest. Two Lockers share locks when they use the
// same prefix; do not use one prefix inside another.
package etcd
