// Package election elects one leader per role among processes, on any
// distlock backend, and hands every term a fencing token.
//
// A role is a lock key. [Election.Campaign] waits for the key's lock (with
// the candidate's value stored with it) and returns a [Term]: the term's
// lease renews itself while held, its Token is larger than every earlier
// term's, and its Done closes the moment leadership is lost — resigned,
// expired, taken over after a pause, or its Locker closed. A leader that
// writes to a shared resource should write through the term's Fence (package
// fencing), so a leader that lost its term without knowing it (a long GC
// pause, a partition) is refused by the resource rather than trusted.
//
// Observers read the current leader with [Election.Leader] and follow
// changes with [Election.Observe], built on Locker.Inspect and Locker.Watch:
// etcd and ZooKeeper push changes from server watches, the memory store at
// once; Redis and Redlock are followed through release notices and polling
// bounded by the back-off cap (WithBackoff), so a new leader is seen within
// that bound there. Observe reports every leader it sees in term order (each
// token larger than the last); a hand-over faster than the polling bound may
// be seen only as its last leader.
//
// Observers see what the server has: for a moment after a Campaign whose
// context ended mid-call, that can be the abandoned attempt (with its value
// and token) until it is given back; it never held a Term, so it wrote
// nothing through a fence, and its token is below the next term's. A server
// that loses writes (a restart from an older snapshot, a failover to a
// replica that missed the latest grants) can show an earlier leader again,
// with its smaller token: Observe does not report it, so the next leader an
// observer sees is one elected after that lock ends, with a larger token.
//
// Election needs nothing from a backend beyond distlock.Locker, so a new
// backend gets it by implementing driver.Backend.Inspect (and Watch where
// its server pushes changes). What a term guarantees is what the backend's
// leases guarantee: read its Guarantees (Redlock depends on bounded clock
// drift, single Redis may lose a lock on failover; the fencing token is the
// defence in both cases).
package election
