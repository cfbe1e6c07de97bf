// Package redlock is the Redlock backend of distlock: one lock over N
// independent Redis nodes (N odd, at least 3), held while a majority
// (quorum N/2+1) of them hold it. It serves "redlock://" URLs for
// distlock.Open and runs, on each node, the scripts and the key layout of
// the single-Redis backend (package redis), which the two packages share
// through an internal package; [distlock.Lease.As] with a *[redis.Keys]
// gives a lease's key names.
//
// # Algorithm
//
// An acquire records its start, then:
//
//  1. Phase 1 sends the acquire script (SET NX PX ttl, and that node's
//     token counter advanced when the SET succeeded) to every node in
//     parallel, each call bounded by the node timeout (see
//     [WithNodeTimeout]), far below the TTL. It goes on as soon as a
//     quorum said yes, without waiting for the slowest nodes; it gives up
//     as soon as a quorum can no longer be reached. In a waiting Acquire a
//     node whose last call timed out (in the last 5s; any answer clears
//     it) is still asked, but not waited for once the other nodes alone
//     decide the vote (unless they are too few for a quorum): a hung
//     node's timeout would otherwise decide every split vote, and
//     contenders that fail together, one node timeout later, split the
//     live nodes again (a livelock). A TryAcquire waits for every node up
//     to the node timeout, and never pauses. A waiting Acquire whose split
//     vote a node that did not answer could still have decided pauses a
//     random time before its next attempt, up to two node timeouts and
//     never past the end of the shortest lock that said "held".
//  2. The token T is the maximum of the counters of the acquired quorum.
//  3. Phase 2 runs the raise script on those nodes in parallel: "if the lock
//     still holds my owner value, raise the counter to at least T and
//     record T (and the value) as the holder's" (see Inspection). The
//     acquire succeeds only if a majority accepted it, and only if the
//     whole attempt ended within its validity: TTL − elapsed − drift,
//     drift = TTL·factor + minimum (distlock.WithDrift).
//
// On failure the lock is released on every node, including the ones that did
// not answer (their release runs in the background once their own call
// ended, bounded by the node timeout), and TryLock reports a
// *distlock.HeldError carrying the smallest remaining TTL of the holders it
// saw when any node said the key was held — which covers a split vote, so
// the portable layer waits for a release notice or, failing that, its
// jittered fallback — or an error matching [ErrNoQuorum] naming how many
// nodes answered. A straggler that says yes after a successful acquire keeps
// the lock for this lease: Refresh and Unlock go to every node anyway.
//
// Refresh extends the lock on every node where it is ours and takes it back
// (SET, and the counter raised to the lease's token) where it is missing, so
// a lease granted by exactly a majority survives the loss of a node of it.
// (The auto-renewer refreshes the leases that fall due together in one
// pipeline per node, where each lock first gets a short extend that applies
// only when the lock and its holder record are ours; the rest get the
// repairing script in a second pipeline.) It takes a node back only while a
// majority of the nodes have held the lock without a break (a node out of
// reach counts while the lock set there has not expired): otherwise a
// majority was free at some moment and another client could have held the
// key, and the lease is reported lost. A node that granted the lock only
// after the grant was decided does not count as held without a break until a
// refresh has renewed it: from the client, a lock it set there after the
// majority was free looks the same. So a lease decided by a bare majority is
// reported lost if a node of that majority loses the lock before the first
// refresh, though a late node holds it. It decides at quorum like an
// acquire; Unlock first waits, up to the node timeout, for the last
// refresh's slower calls, so that a repairing call does not land after the
// release. Refresh succeeds only when a quorum confirmed it within the
// validity; Unlock goes to every node (each release publishes the node's
// release notice) and waits for all of them, up to the node timeout, so that
// a TryAcquire right after a Release does not find the old lock on a slower
// node. Waiters subscribe to the release notices of every node (one pub/sub
// connection per node) and wake on any, once per burst (one release notifies
// from every node it held), after a random delay of up to 3ms so that the
// waiters one release woke do not all try at once and split the votes again.
// After an attempt lost to "held" answers alone (the nodes it did not hear
// from could not have made its quorum), a waiter ignores the notices of the
// nodes it took (and gave back) or left unread: they are its own give-backs,
// on which it would try again at once for as long as the key is held, and a
// release there cannot change the vote. A release on a node that said "held"
// wakes it; an expiry, or a lock deleted without a release, is found by
// trying again within half a second.
//
// # Why the tokens increase
//
// No Redlock library offers fencing tokens; phase 2 is what makes them
// work. Say lease A got token T and its phase 2 was accepted by majority
// M. On each node of M the counter is ≥ T, and it was raised while A held
// the lock there. A later lease B is granted by a majority M′, which
// intersects M in at least one node x. On x, B's SET NX succeeded, so it
// came after A's lock on x was gone — after A's raise — and x handed B
// more than its counter, so more than T. B's token, the maximum over M′, is therefore larger
// than T. A node where A's raise was refused (the lock had expired or
// someone else held it) is simply not in M.
//
// If x restarted without persistence in between, or from an older snapshot,
// its counter is missing or stale. The acquire script therefore takes
// max(counter + 1, x's clock in microseconds) as x's token: every counter
// grows by one per grant, far slower than a microsecond clock, so x's clock
// is past T as long as the nodes' clocks differ by less than the time x was
// down. That holds for rolling restarts, for restarts from snapshots and
// for restarted nodes meeting nodes that missed grants (all tested),
// without fsync.
//
// # Assumptions and guarantees
//
// Mutual exclusion needs bounded clock drift: each node expires the lock by
// its own clock, and a clock that jumps forward on a node of the holder's
// majority can free the lock early there, letting a second client form a
// majority. The fencing token still protects a resource that checks it:
// the second client's majority meets the first one's phase-2 majority, so
// its token is larger (tested by emulating the jump with a DEL on one node).
//
// Mutual exclusion also needs nodes that do not lose a held lock: a node
// restarted without appendfsync always forgets it. Either run the nodes with
// fsync, or keep a crashed node down for at least the longest TTL in use
// (the "delayed restart" of the Redlock description), during which it is
// one of the ⌊(N−1)/2⌋ failures tolerated; a held lease takes the lock back
// on it when it returns. The token order needs neither, only the clock bound
// above. A counter expires an hour past the last grant that raised it (the
// next token then comes from the node's clock): so the token order also
// needs node clocks within an hour of each other, since a counter raised
// from a fast node's clock is forgotten after that. A maxmemory-policy of
// allkeys-* could
// evict them (this backend does not check the policy; see package redis).
//
// A node call, once sent, runs to its answer or the node timeout whatever
// its caller does, and its answer still updates what the lease knows. Any
// request may also land late, after the call gave up on it, or twice: so
// each refresh carries the lease's refresh number, kept on the node until
// 5 s past its lock, and a copy older than the newest applied changes
// nothing there; a release leaves a tombstone of the lease's owner value on
// every node it reaches, for 5 s (an attempt given back, for its TTL + 5 s),
// which a late acquire or repairing refresh
// of that lease honours, and which makes a resent release count the node as
// released; and a node that refuses an attempt remembers it as refused for
// as long, so a late copy of that attempt takes nothing there. A request
// held up for longer than 5 s (say, buffered in a paused node's socket) can
// still land: the lock then sits on that one node, a minority, until its
// TTL.
//
// Waiters are woken by release notices, not in FIFO order.
//
// # Inspection
//
// Locker.Inspect reads every node at once (one script that writes nothing,
// each bounded by the node timeout) and reports a holder only when a
// majority of the nodes hold the lock for one owner and have that owner's
// holder record (see package redis for the key). Phase 2 writes the record
// (owner, token, value) where it raises the counter to the token, so records
// on a majority put the token below every later majority's (the two
// majorities meet): Locker.Watch, which reports only growing tokens, then
// misses no later holder. An attempt whose phase 2 reached a minority is not
// reported. Each refresh extends the record with the lock, or writes it
// where it is missing or another owner's, and with a lock it takes back; a
// release deletes it; otherwise it expires with the lock. Until its first
// refresh, a lease decided by a bare majority has no record on the nodes
// that answered phase 1 late: with a node of that majority down, Inspect
// fails with ErrNoQuorum (or reports free if the node lost its data). Token
// and Value come from the record, never from a node's counter, which can be
// above the lease's token: a node restarted without its data seeds its
// counter from its clock, and a node that answered phase 1 late kept its own
// increment. TTL is conservative: how long a majority still holds the lock
// by the PTTLs read, less the time the read took and the default drift
// allowance (1% of it plus 2ms; a Locker's WithDrift does not reach
// Inspect), at least 1ms while held. Waiters is -1.
//
// Inspect returns as soon as no answer still to come can change its
// verdict. It fails with an error matching [ErrNoQuorum] (and
// distlock.ErrUnavailable) when fewer than a majority of the nodes
// answered, and when the nodes that did not answer could make or unmake a
// majority (held on one node of three, free on another, the third
// silent): "free" would then be a guess. What it does not promise: the
// nodes are read one by one, not at one instant, so the holder it reports
// may have released or lost the lock by the time it returns; an acquire
// between its two phases is reported free, and one whose phase 2 reached
// a majority but failed may be reported held until it gives the lock back
// (at once). A value is stored (and sent with every refresh) only when
// given; the record itself, with the token, is written and extended for
// every lease: two more commands in phase 2 and in each refresh, inside
// the scripts that run there anyway.
//
// There is no server-side watch (driver.Watcher): Redis pushes key changes
// only as keyspace notifications, which need server configuration this
// library does not assume. Locker.Watch wakes on the nodes' release
// notices and polls for grants and expiries, backing off up to the
// Locker's WithBackoff cap while nothing changes.
//
// A server given twice would count twice toward the quorum, so Open and New
// refuse it, names resolved and port 6379 applied; New compares the address
// of a go-redis *Client (clients that reach their nodes through a Dialer of
// their own give each node its own Addr), and of other clients only their
// identity.
//
// Clients should set ContextTimeoutEnabled so that context deadlines bound
// socket reads; this backend also stops waiting for a node after the node
// timeout whatever its client does.
//
// go-redis's log lines, for the clients distlock.Open dials, go to the
// logger given with distlock.WithLogger or nowhere (see package redis).
//
// # TLS, ACL users and least privilege
//
//	redlock://app@r1:6380,r2:6380,r3:6380/0?tls=true&ca_file=/ca.pem&cert_file=/c.pem&key_file=/c-key.pem&password_file=/run/secrets/redis
//
// tls=true (or any of ca_file, cert_file, key_file, server_name,
// skip_verify) turns TLS on for every node, each checked for its own host;
// the user and password (or password_file) log in to every node. Each node
// needs the ACL of package redis's lock user:
//
//	ACL SETUSER app on >PASSWORD resetkeys ~distlock:* resetchannels &distlock:* -@all +ping +evalsha +eval +subscribe +unsubscribe +publish +time +get +set +del +exists +incr +pexpire +pexpireat +pttl +hget +hset +hmget +zadd +zcount +zrange +zrangebyscore +zrem +zscore
//
// When refusals alone (a wrong password, a rejected certificate, a NOPERM)
// leave no majority, calls fail with distlock.ErrAccessDenied, not
// ErrNoQuorum, and a waiting Acquire returns at once. A node that refuses
// PUBLISH does not fail a release; one that refuses SUBSCRIBE is polled
// (logged once). See docs/security-redis.md.
package redlock
