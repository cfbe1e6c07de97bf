// Package zookeeper is the ZooKeeper backend of distlock, on
// github.com/go-zookeeper/zk, behind "zk://" URLs. It requires ZooKeeper
// 3.5.3 or newer (container znodes).
//
//	zk://zk1:2181,zk2:2181/distlock?session_timeout=…
//	zk://app:secret@zk1:2181,zk2:2181/distlock                 digest auth
//	zk://app@zk1:2181/distlock?password_file=/run/secrets/zk   the password from a file
//	zk://app:secret@zk1:2281/distlock?ca_file=/etc/zk/ca.pem&cert_file=/etc/zk/app.pem&key_file=/etc/zk/app-key.pem
//
// [Dial] makes the connection itself, owns it and watches it, as does
// distlock.Open with a zk:// URL. [New] runs on a *zk.Conn the caller made
// and keeps; pass its event channel with [WithEvents]. [NewBackend] is
// New's raw driver.Backend, for wrapping; a dialled raw Backend comes from
// driver.Lookup("zk").
//
// A lock is an EPHEMERAL|SEQUENTIAL znode under base/<escaped key>/ (a
// container znode the server reaps when empty); the lowest sequence holds
// the lock, and a waiter watches only its predecessor, so waiters are
// served first come, first served. The fencing token is the lock znode's
// czxid, a 64-bit ensemble-wide transaction id, so it strictly increases
// across the holders of a key, even when a key directory is reaped and
// recreated.
//
// Guarantees:
//   - A lock lives as long as the Locker's ZooKeeper session: the server
//     frees it on release or when the session ends (Close, or expiry after
//     the session timeout without contact). The TTL sets nothing on the
//     server; it drives the local deadline, and a refresh only confirms
//     that the znode still exists for this session.
//   - Mutual exclusion does not depend on clocks. An ensemble of n servers
//     keeps locks and tokens while (n−1)/2 servers are lost; a standalone
//     server tolerates no failure.
//   - Lease.Done closes (ErrLeaseLost) when the session expires, when the
//     connection stays down for the disconnect grace
//     ([WithDisconnectGrace]), and, with Dial, when the server has
//     answered nothing for two thirds of the smallest session timeout it
//     granted. With Dial that notice comes before the server can expire
//     the session and grant the lock to another client, given timer
//     lateness under the last third of the timeout and, in an ensemble
//     with the default grace, syncLimit·tickTime + tickTime/2 under 5/12
//     of the session timeout
//     (with the stock tickTime=2s and syncLimit=5: a session timeout of at
//     least 27 s). With New the notice is ahead of the server only while
//     the round trip stays under a third of the timeout less the grace.
//   - Renewal of the leases that fall due together is one RefreshBatch;
//     with Dial a batch of up to 256 leases costs one round trip, because
//     the backend watches each held znode.
//
// Inspect reports the lowest lock znode's czxid and data, a TTL of 0 (the
// lock lasts as long as its session) and the znodes queued behind it as
// Waiters; it reads from the connected server, which may lag the leader.
// Watch sets a child watch on the key directory.
//
// Without credentials the Locker's znodes are open to all (world:anyone):
// any client can delete a lock znode. With credentials every znode the
// Locker creates carries the user's digest ACL alone, and Dial (for the
// base path) and each acquire (for its key directory) refuse a parent that
// lets anyone else create, delete or re-ACL children ([ErrOpenACL],
// unless allow_open_acl=true). Create the base path before first use:
// ZooKeeper takes any digest password as some identity. A refused password, user, TLS handshake or NOAUTH is
// distlock.ErrAccessDenied.
//
// See docs/backends/zookeeper.md for the algorithm, the renewal watches,
// the session timing conditions behind the loss notice (ensemble, New,
// disconnect grace) and what Inspect and Watch report, and
// docs/security-zookeeper.md for the ACL recipe and least rights.
package zookeeper
