// Package zookeeper is the ZooKeeper backend of distlock, on
// github.com/go-zookeeper/zk, behind "zk://" URLs.
//
// # Constructors
//
// [New] runs on a *zk.Conn the caller made and keeps. [Dial] makes the
// connection itself, owns it, and watches it (see "Loss notice before
// takeover" below), as does distlock.Open with a zk:// URL. [NewBackend] is
// New's raw driver.Backend, for wrapping (tests, middleware); a dialled raw
// Backend comes from the URL opener, driver.Lookup("zk").
//
// # Security
//
// Without credentials the Locker's znodes are open to all (world:anyone,
// cdrwa): any client that reaches the server can delete a lock znode, and
// so end anyone's lock or take it over. With credentials every znode the
// Locker creates (the base path and its missing ancestors, the key
// directories, the lock znodes) carries the user's digest ACL alone. A
// delete is checked against the parent's ACL, so Dial checks that the base
// path, and each acquire that its key directory, lets no one else create,
// delete or re-ACL children: an entry granting c, d or a to world:anyone,
// an ip range (ip:0.0.0.0/0 is everyone), another digest user or an x509
// subject makes it [ErrOpenACL] unless allow_open_acl=true
// ([WithAllowOpenACL]). Lockers sharing a base path must share its user: a
// key directory belongs to the user who made it.
//
//	zk://app:secret@zk1:2181,zk2:2181/distlock                 digest auth
//	zk://app@zk1:2181/distlock?password_file=/run/secrets/zk   the password from a file
//	zk://app:secret@zk1:2281/distlock?ca_file=/etc/zk/ca.pem&cert_file=/etc/zk/app.pem&key_file=/etc/zk/app-key.pem
//
// The last is TLS (mutual) to a secureClientPort; server_name, skip_verify
// and tls=true are as in package driver, and distlock.WithTLSConfig sets
// a *tls.Config. A wrong password, a user the base path does not admit, a
// TLS handshake either side refuses, and the server's NOAUTH on a create
// or delete are distlock.ErrAccessDenied, at once. ZooKeeper takes any
// digest password as some identity, so a Locker that finds no base path
// creates it for the credentials it has: one with a wrong password creates
// it for that password, and the right one is then refused. Create the base
// path before first use, as an operator (the recipe) or once with checked
// credentials. The least rights are
// cdr on the base path (create, read, delete key directories); the recipe
// and what it guards against are in docs/security-zookeeper.md.
//
// # Algorithm
//
// A lock on key lives under base/<escaped key>/, a container znode that the
// server deletes once its last lock znode is gone: at its next check (every
// znode.container.checkIntervalMs, 60 s by default), at most
// znode.container.maxPerMinute a minute (10000 by default: raise it for more
// new keys a minute). One that never held a lock znode (its Locker died or
// closed before creating one) stays unless
// znode.container.maxNeverUsedIntervalMs is set. The base path is
// persistent. To take a lock, a client creates an EPHEMERAL|SEQUENTIAL znode
// named "lock-<owner>-<sequence>" there and lists the children: the lowest
// sequence holds the lock. A waiter watches only its immediate predecessor
// (no herd effect), so waiters are served first come, first served. A
// waiter whose context ends deletes its znode before returning. The owner in
// the name is the lease's random 128-bit id: when a create's reply is lost
// with the connection, the znode is found again by that id and deleted (as
// Curator's "protected" mode does), so no orphan blocks the queue until the
// session ends. Close gives back the znodes of creates still in flight: with
// Dial it ends the session, after them on the connection; with New, whose
// session outlives the Locker, it waits for their replies and deletes the
// znodes, within the release timeout (distlock.WithReleaseTimeout). A create
// the server answers only later stays until the session ends.
//
// The fencing token is the lock znode's czxid: the ZooKeeper transaction id
// of its creation, 64-bit and ensemble-wide, so it strictly increases across
// the successive holders of a key — even when an empty key directory was
// reaped and recreated, which resets the 32-bit sequence suffix.
//
// # Guarantees
//
// A lock lives as long as the Locker's ZooKeeper session (one session per
// Locker): the server frees it when the holder releases it, or when the
// session ends (Close, or expiry after the session timeout without contact).
// The TTL option sets nothing on the server; it only drives the portable
// layer's local deadline, and a Refresh merely confirms the znode still
// exists. So a lease that is neither renewed (Do, WithAutoRenew) nor
// refreshed ends locally after its TTL while its znode stays until Release,
// Close or the session's end. Mutual exclusion does not depend on clocks.
// An ensemble of n servers keeps locks and tokens while a minority of
// (n−1)/2 servers is lost; a standalone server tolerates no failure.
//
// # Renewal
//
// A refresh extends nothing on the server. It confirms that the lock znode
// still exists with the lease's czxid and with the lease's session as its
// ephemeral owner, and that the connection still runs that session. The
// portable layer renews the leases that fall due together with one
// RefreshBatch call, from one goroutine per Locker; a lease has none.
//
// With [Dial] the backend receives the connection's events itself, on
// go-zookeeper's reading goroutine, in the order the server sent them and
// before any later reply is handed over; and a server processes no read
// while it applies a write, so it answers a read processed after a
// deletion after sending the deletion's event. So the backend
// watches each held znode: a lease's first refresh reads its znode with a
// data watch (GetW), and later refreshes send no read of their own. A
// batch sends one read (of one of its znodes); once it is answered, any
// deletion the server had applied by then has arrived as an event, and a
// znode no event came for is known to exist at that point, as if it had
// been read. A batch of up to 256 leases costs one round trip. An event on
// a held znode fires its watch: a deletion marks it gone (its lease ends
// at its next refresh, within a renew interval); anything else (its data
// set by someone, the watches dropped) leaves it unwatched, and its next
// refresh reads it again with a watch. What a watch cannot see is read:
//   - after a reconnection within the session, the server sends the events
//     the client missed again on the new connection (go-zookeeper's
//     SetWatches, which also keeps the watches), but perhaps after the
//     replies a refresh waits for, so each znode is read once more (Exists)
//     before its watch is trusted again;
//   - a session's end is the loss of all its leases (see below), and a new
//     session is a new connection;
//   - a path reused (a key directory reaped and recreated restarts the
//     sequence): the old znode's deletion comes first, and every read
//     compares the czxid and the owner.
//
// The watch relies on go-zookeeper re-registering it on each reconnection:
// should that request fail without the connection dropping, an
// administrator's deletion of a lock znode would go unseen until the next
// reconnection. Mutual exclusion does not depend on it, only on the
// session. A multi of check operations would not do instead: a check
// compares a version, which a znode recreated at the same path shares, and
// a multi is a write, through the leader.
//
// With [New] the events come late if at all (WithEvents drains them on a
// goroutine of the backend's, and go-zookeeper drops them when the channel
// is full): each refresh reads every znode of the batch (Exists).
//
// The reads of a batch are pipelined on the connection from at most 16
// goroutines (go-zookeeper's calls block), which end with the batch.
//
// Either way a refresh needs an answer to a request sent after it began,
// so on a silent link it confirms nothing.
//
// # Session states and Lease.Done
//
// A lease's Done channel closes (Err matching distlock.ErrLeaseLost) when
//   - the session expires: every lease of the session is lost;
//   - the connection has been down for the disconnect grace (see
//     WithDisconnectGrace); or
//   - with Dial, the server has answered nothing for two thirds of the
//     session timeout it granted (the silence bound).
//
// A lease reported lost while its session survives is deleted on
// reconnection. While the connection is down but within these bounds, the
// lease is at risk and Done stays open.
//
// # Loss notice before takeover
//
// Done closes before the server can expire the session and grant the lock
// to another client. The server expires a session no sooner than its
// timeout after the last request it received from it, and the timeout that
// counts is one the server granted: it clamps the one asked for into its
// [minSessionTimeout, maxSessionTimeout] (by default 2 and 20 ticks, 4 s
// and 40 s with the stock tickTime). Of the timeouts it granted a session,
// the smallest counts: the server stores the one it granted when it
// created the session, and a restarted server, or a new leader, restores
// the session with that one, whatever a later connection was granted (more,
// if minSessionTimeout was raised meanwhile). Dial watches its connections
// (it wraps go-zookeeper's dialer): it reads the granted timeout off the
// connect response of every connection and keeps the smallest granted to
// the session, T below (a new session starts afresh); and, since a
// session's requests are answered in order, it knows the send time t0 of
// the newest request the server has answered; the server heard from the
// session at t0 or later. It hands go-zookeeper T in place of a larger
// grant, so that go-zookeeper pings every T/3 and gives up on a silent
// connection after 2T/3 of the timeout that binds. The worst case, a link
// that goes silent:
//
//	t0          the client sends a request (a ping goes every T/3 at least)
//	            whose reply is the last it hears
//	t0 + 2T/3   Done closes (the silence bound) and the backend drops the
//	            connection, as go-zookeeper itself would: its read timeout
//	            is 2T/3 after the last reply
//	t0 + T      at the earliest, the server expires the session, deletes
//	            the lock znode, and the next waiter is granted the lock
//
// The last third of T is left for the client's timer lateness (scheduling,
// GC). A holder paused for longer, or a client clock running slow against
// the server's, is beyond any notice: fencing tokens are for that. The
// disconnect grace counts from go-zookeeper's disconnect event, which for a
// broken link (reset, refused, closed by the server) comes at once and for
// a silent one only at t0 + 2T/3 or later; it lets a lease survive a quick
// reconnection and never extends the silence bound. Its default is T/4,
// following T as it changes. Dial refuses a WithDisconnectGrace of 2T/3 or
// more of the first session's granted timeout: the silence bound would
// always come first, so such a grace would promise a tolerance that cannot
// be had; should T shrink later, the silence bound clamps the grace.
//
// Slow replies cost the notice nothing, since it counts from send times,
// but a link whose round trip (request sent to reply received) exceeds T/3
// cannot keep a lease: just before a ping's reply arrives, the newest
// request answered is T/3 plus a round trip old, so the silence bound
// reports the leases lost and drops the connection although the session
// lives. That is early, on the safe side; the lost leases' znodes are
// deleted once a connection is back, and it happens again for as long as
// the link stays that slow.
//
// The silence bound assumes that the server which answers is the one that
// expires sessions. In an ensemble only the leader does, and it learns of
// a client's pings to a follower only from that follower's answers to its
// own, every tickTime/2. Two cases eat into the last third of T. First, a
// follower cut off from the leader goes on answering its clients' pings
// for up to syncLimit·tickTime (until it notices the leader's silence and
// drops them), while the leader learns of no more of them after the cut;
// the last one it learnt of may be T/3 old. The notice stays ahead of the
// leader if
//
//	syncLimit·tickTime + tickTime/2 + min(grace, 2T/3) < 2T/3
//
// that is, with the default grace, syncLimit·tickTime + tickTime/2 under
// 5T/12: with the stock tickTime=2s and syncLimit=5, a session timeout of
// at least 27 s (and maxSessionTimeout to match). Second, a follower that
// answers a ping and then freezes (a long pause, or its host cut off from
// client and leader alike, with no FIN reaching the client) may never pass
// that ping on: the leader's last news of the session may be a ping
// interval, T/3, older than the client's, and the leader can expire the
// session 2T/3 after t0, just when the silence bound fires. Nothing is left
// for timer lateness then: the notice is ahead only by the leader's
// rounding of expiry times up to its next tick and by the time the
// hand-over to the next waiter takes. The same condition covers a third
// case, the worst: a leader that stalls (a pause, a long GC) for longer
// than T but less than syncLimit·tickTime is not deposed, learns of no
// session meanwhile, and on waking expires every follower session older
// than T at once, while the followers went on answering their clients: a
// holder sees no silence at all and learns of its loss only after the next
// waiter was granted (found by the fault soak on an ensemble with
// syncLimit·tickTime = 3 s and T = 1.5 s; reproduced by pausing the leader
// for 2.2 s). Keep syncLimit·tickTime + tickTime/2 under 5T/12.
//
// With New the backend cannot see the caller's connection: neither the
// granted timeouts nor the server's last answer, only the disconnect
// event, which for a silent link comes 2T/3 after the last reply arrived
// (T as go-zookeeper knows it), and later if a write hangs. Its grace
// therefore defaults to zero, which puts the notice about where Dial's
// silence bound is, but counted from the reply's arrival, not from its
// request's send time: the server may have last heard from the session a
// round trip before. So New's notice is ahead of the server only while the
// round trip stays under T/3 − grace, less the lateness of events and
// timers; on a slower link another client may be granted the lock before
// Done closes, and New cannot tell (Dial reports the loss early instead,
// see above). And go-zookeeper follows the newest grant: if the session
// was created with a smaller timeout, a restarted server or a new leader
// may expire the session on that one long before go-zookeeper notices the
// silence. A nonzero grace needs WithSessionTimeout, which must then be
// the smallest timeout granted to the session (or less), and must be under
// a third of it (2T/3 + grace < T). Dial behaves as New, and refuses a
// nonzero grace, if a zk.WithDialer in WithConnOptions replaces its dialer.
//
// go-zookeeper pauses about a second before it retries a server list it has
// gone through, so with a single server (or short session timeouts) a grace
// under a second turns every reconnection into a reported loss. These
// signals need the session's events: [Dial] receives them itself; with
// [New] pass the event channel from zk.Connect through [WithEvents].
// Without events Done closes only when a Refresh (Do and WithAutoRenew
// refresh every TTL/3) finds the znode gone.
//
// # Inspect and Watch
//
// The holder's value (distlock.WithValue) is its lock znode's data, written
// by the create that queues it: no request of its own, and none of it
// without a value (the znode then has no data, as before values existed).
// With Dial, a lease's first refresh reads its znode (GetW, see Renewal),
// so the value crosses the network once more per lease.
//
// Inspect lists the key directory and reads the lowest lock znode (one
// GetData returns its data and its stat): two round trips. It reports
//   - Token: that znode's czxid, the holder's Lease.Token;
//   - Value: its data;
//   - TTL: always 0. The lock lasts as long as its holder's session, and
//     the server keeps no time per lock (the session's timeout runs only
//     while its client is silent);
//   - Waiters: the lock znodes listed after the holder's. That is the
//     Acquire calls queued, but also a TryAcquire that is checking its
//     place (its znode lives for one round trip) and the znode of an
//     abandoned wait the backend has not deleted yet;
//   - a missing key directory, or one without lock znodes, as a free key.
//
// If the holder releases between the listing and the read, the next znode
// of the listing is read instead. Once read, it is the holder: every znode
// listed before it is gone, and znodes created later have larger sequence
// numbers. So a hand-over costs one read more, not a new listing. When
// every znode read is gone, Inspect lists the directory again; after three
// listings it returns an error. A znode found gone is never reported.
//
// The server the session is connected to answers the reads, and in an
// ensemble it may lag the leader. So Inspect may report a holder that has
// just released, or miss a lock the leader has just granted. A session
// reads the ensemble's history in order, across reconnections too (a
// server behind what the session has seen refuses it), so one Locker's
// reads do not go back in time while its session lasts; after an expiry
// go-zookeeper forgets what it saw, and the new session may land on a
// server further behind. Inspect sends no sync (a round trip through the
// leader) first. A holder whose lease has already
// reported its loss (Done closed after the disconnect grace or the
// silence bound) is reported as long as its znode lives, as the server
// sees it: until the session ends or the znode is deleted on reconnection.
//
// Watch sets a child watch on the key directory. While the directory is
// missing it sets an exist watch instead (the server reaps an empty
// container, so the directory comes and goes). A ZooKeeper watch fires
// once. Each time one fires, Wait reads the directory again with a new
// watch before it returns, so no change falls between two watches. It
// compares the two reads and returns when the lowest lock znode differs.
// It also returns when it cannot tell: the key was free at both reads but
// children came and went meanwhile (a short holder), or the directory was
// missing at either read. A waiter joining or leaving fires the watch but
// ends no Wait. Each firing costs one read.
//
// Watches outlive a reconnection within the session: go-zookeeper sets
// them again on the new connection, and the server fires at once those
// whose path changed in between. A session's expiry fires them all, and
// Wait sets its watch again in the new session. While the connection is
// down, Wait tries its read again until its context ends (the portable
// layer then inspects, and calls Wait again, which reads and compares
// again); a read that fails for good (the backend closed) ends Wait with
// an error, after which the portable layer polls and calls Watch again. Should go-zookeeper's
// request to set the watches again fail without the connection dropping
// (see Renewal), a Watch would go silent; the portable layer's poll
// (every 5 s while notices are pushed) bounds that.
//
// go-zookeeper cannot remove a watch (ZooKeeper's removeWatches is not in
// its API), so a closed subscription leaves its watch set until the
// directory next changes or the session ends. That leaves at most one
// watch per key directory on the server, which keeps one per path and
// connection, and about one in the client: a Locker's subscriptions to a
// key share the watch that has not fired yet. The first Watch of a key
// costs a read; the others cost none while it is set. Watch and Wait run
// no goroutine of their own. A read cut short by its context finishes on
// its own goroutine, within about a session timeout.
//
// It requires ZooKeeper 3.5.3 or newer (container znodes).
package zookeeper
