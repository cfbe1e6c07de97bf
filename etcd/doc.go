// Package etcd is the distlock backend on etcd v3: a revision-ordered queue
// of lease-bound keys, the same recipe as etcd's own concurrency.Mutex, with
// a faster hand-off. It serves "etcd://host:port,host:port/" URLs, and
// "etcds://…" for TLS.
//
// # URLs, TLS and a least-privilege role
//
// The TLS parameters are etcdctl's flags as file paths (--cacert, --cert,
// --key): TLS is on with etcds:// (etcdctl's https:// endpoints), tls=true
// or any of them.
//
//	etcd://10.0.0.1:2379,10.0.0.2:2379/?prefix=app         plain
//	etcds://etcd.internal:2379/?ca_file=/ca.pem&cert_file=/app.pem&key_file=/app-key.pem
//	etcds://app@etcd.internal:2379/?ca_file=/ca.pem&password_file=/run/secrets/etcd
//
// server_name overrides the host a server certificate is verified for;
// distlock.WithTLSConfig gives a *tls.Config instead. With a client
// certificate and no user, etcd takes the certificate's CN as the user
// (--client-cert-auth). A Locker needs read and write on the range
// prefix/ and nothing else (Open reads only that range); the role for
// prefix=app:
//
//	etcdctl role add app-locks
//	etcdctl role grant-permission app-locks --prefix=true readwrite app/
//	etcdctl user add app --no-password     # logs in by a certificate with CN app
//	etcdctl user grant-role app app-locks
//
// Grant "app/", with the slash: a grant of "app" covers app-billing/ too.
// Every holder of the role can delete any lock under the prefix; give each
// application a prefix and a role of its own. A refused certificate,
// password or permission is distlock.ErrAccessDenied, from Open (which
// checks the TLS handshake itself, within dial_timeout, and names its
// cause) and from every call. See docs/security-etcd.md.
//
// # How a lock works
//
// Each attempt on key K creates prefix/K/<owner> (owner is random per lease)
// bound to an etcd lease, with the holder's value (WithValue) as the key's
// value, in one transaction that also reads the queue. The
// owner of K is the key with the lowest CreateRevision under prefix/K/; the
// fencing token is that CreateRevision, a cluster-wide revision, so tokens
// strictly increase across holders of K and across restarts and leader
// changes. A waiter watches only its predecessor, from the store's current
// revision, so that etcd delivers the release at once instead of from its
// 100 ms catch-up loop (which serves watches that start in the past); one to
// three re-reads of the queue in the watch's first 60 ms cover the revisions
// between the waiter's read and its watch, and a write that races the
// watch's creation. Waiters acquire in the order their keys were created
// (FIFO). When its predecessor goes, a waiter reads the queue before it
// takes the lock, even if that predecessor was the holder: the read proves
// its own key is still there, so a waiter whose key was deleted meanwhile
// (by an operator, or with its lease) does not hold the lock alongside the
// one behind it. A waiter whose context ends deletes its key.
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
// path) delays notices by about that much per try, not until it comes
// back. The client's balancer picks the member of each new watch, and may
// pick the hung one again (about one time in the number of endpoints).
// Each try has a gRPC stream of its own, on a clientv3.Watcher of its own
// that is closed with the try (the client shares one stream among watches
// with the same context metadata, and a watch given up before its member
// answered pins that stream to the member, with every later watch of the
// same metadata queued behind it, unsent). A client whose Watcher is
// wrapped (namespace.NewWatcher) is watched through the wrapper, each try
// with metadata of its own; a stream pinned there stays open, idle, until
// the member answers or the client closes.
//
// # A member that hangs
//
// A member that stops answering with its connection open (SIGSTOP, a
// stalled disk, a silent network path) is not noticed by gRPC unless the
// client sends keep-alive pings; meanwhile the balancer keeps sending it
// calls, which wait out their contexts. The client Open makes pings every
// 10 s and drops a connection silent for 5 s more, so calls succeed again
// about 15 s after a member hangs; a client given to New needs
// DialKeepAliveTime and DialKeepAliveTimeout set for the same (etcd refuses
// pings more often than every 5 s by default). After an outage the client
// Open makes reconnects within a second (gRPC's own pacing grows to
// 120 s); give a client of yours grpc.WithConnectParams for the same. The
// backend itself bounds what it does in the background: the loss watch as
// above; a waiting
// Acquire reads its place in the queue every 5 s besides watching its
// predecessor, so a watch on a hung member cannot leave a waiter, first in
// the queue and so the owner, unaware of it for longer (until then every
// other Locker waits behind it); each of its reads is sent again after
// 100 ms without an answer, up to three copies (each a new pick of the
// balancer), gives up after 2 s and is then tried again at once, so a
// hand-off is not held up by a read sent to the hung member; and its lease is
// renewed from a goroutine of its own, which no read or watch of the wait
// holds up, each try bounded by a sixth of the lease and a failed one
// tried again at once, as is the renewal of a waiter that becomes the
// owner with less than half its TTL left.
//
// # Inspect and Watch
//
// The value is written by the Put that creates the queue key, so storing
// it costs no round trip, and with no value the key is what it was
// before: empty. A waiter's key carries its value from the moment it
// queues, so a waiter that becomes the holder is reported with its own
// value, never its predecessor's. A Refresh that moves a key to a lease of
// another TTL leaves the value as it is. Acquire, Refresh and Release read
// keys only, never values.
//
// Inspect makes two round trips: one Get of the queue's oldest key (the
// holder; its CreateRevision is the token, its value the holder's value),
// which also counts the keys behind it, then the remaining TTL of that
// key's lease (LeaseTimeToLive). Both reads are linearizable: a member cut
// off from the leader fails them rather than answer from a stale copy (the
// lease read is the leader's in any case, so a serializable Get would save
// little). What Inspect reports is the queue at the Get's revision and the
// lease a moment later; if the lease is gone by then, the holder has just
// left, and the queue is read again (up to five times, then an error).
//
//   - Waiters counts the keys behind the holder: blocked Acquire calls,
//     including those of a process that died, until their leases run out.
//   - TTL is the lease's remaining time as etcd counts it, in whole seconds
//     rounded down (under a second reads as 1ns, since 0 means no TTL), the
//     time after which etcd frees the key unless the holder refreshes it
//     (plus up to half a second before etcd acts on an expiry). The lease
//     is asked for ceil(TTL)+1 s, so with a TTL that is not whole seconds
//     it may exceed the holder's TTL by under a second.
//   - A key put under the queue by hand with no lease holds the lock until
//     it is deleted; Inspect reports it, with TTL 0. So does a TryAcquire
//     whose reply was lost, until it is given back or its lease runs out,
//     with a token no Lease has.
//
// Watch is one etcd watch on the key's queue per call, made at the
// server's current revision; it returns once the server has confirmed
// the watch (a round trip; a server silent for 5 s makes Watch fail and
// the portable layer poll), so every change after it returns is heard. A
// notice is given for each key created or deleted under the queue, which
// covers every grant, hand-over, release and expiry, and also waiters
// joining and leaving (telling them apart would need a read); not for a
// Refresh that moves a key to another lease. The responses the client
// already holds when a notice is taken add no notice of their own. A watch
// that breaks (the revisions it missed were compacted while it was away,
// its member lost the leader: the watch requires one, or the backend
// closed) makes Wait fail; the portable layer then reads, polls and
// watches again. Close cancels the watch on the server. Unlike the loss
// watch, a Watch is not checked for silence: a member that hangs with its
// connection open delays its notices until the portable layer's next poll
// (5 s). A Watch whose context ends (or whose 5 s run out) before the
// server confirmed it is forgotten by the etcd client (3.5) without being
// cancelled on the server, which keeps that watch until the next change of
// the key.
//
// Server versions: an etcd leader that stalls (a long fsync, CPU
// starvation, SIGSTOP) and then resumes can revoke leases that the new
// leader kept alive (etcd-io/etcd#15247). A lock is then deleted while its
// holder's local deadline still runs, and until the loss notice arrives two
// holders overlap; the soak found exactly that once on Debian's etcd 3.4.23
// with a paused leader, and the fencing guard refused both holders' stale
// writes. The fix (#16822: 3.4.31, 3.5.13, 3.6.0) has the old leader
// confirm its leadership before it revokes, but from 3.4.34, 3.5.16 and
// 3.6.0 on that check is skipped when the member ticked lately (#18428), as
// one resuming from a pause has: 3.5.35, 3.6.16 and 3.7.3 still revoked in
// 18 of 28 such pauses in our test, 3.4.23 in all 15. The tests run 3.5.15,
// which `make setup` builds: the newest release with the check intact.
// Fence the resource whatever the server.
//
// Not guaranteed: RetryAfter in a failed TryAcquire is not filled in (it
// would cost a round trip); a waiter that cannot delete its key when its
// context ends (server down) leaves it in the queue until its lease expires.
//
// Keys are stored as prefix/escaped-key/owner with "%" and "/" escaped, so
// keys that contain "/" do not nest. Two Lockers share locks when they use the
// same prefix; do not use one prefix inside another.
package etcd
