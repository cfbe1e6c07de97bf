// Command leader is a singleton worker: of every instance running it against
// one lock backend, exactly one leads at a time and runs the periodic job;
// the others wait to take over.
//
// Each instance campaigns for a role (package election) with its host and
// pid as value. While it leads, it runs the job every -every: one row
// written to PostgreSQL through the fencing guard (package fencing) with the
// term's fence, so the database refuses the write of a leader whose term has
// passed to another instance. The job stops the moment the term's Done
// closes; the instance then campaigns again. An observer (Observe) prints
// every new leader. Stop the leader with Ctrl-C and it resigns, so another
// instance takes over at once; kill it with -9 (or pause it) and another
// takes over when its lock expires (-ttl; on ZooKeeper the session timeout).
//
// Usage, in two or three terminals (see README.md):
//
//	go run ./examples/leader -url redis://127.0.0.1:6379 -dsn postgres://postgres@127.0.0.1:5432/postgres
//	DISTLOCK_URL=etcd://127.0.0.1:2379 DATABASE_URL=postgres://... go run ./examples/leader
//	go run ./examples/leader -url etcd://127.0.0.1:2379 -observe      # only print who leads
//	go run ./examples/leader -dsn postgres://... -instances 3 -max-runs 3   # mem://: three instances in this process
//
// Flags:
//
//	-url        lock backend URL (empty: $DISTLOCK_URL, else mem://, which only
//	            instances of this one process share: use -instances)
//	-dsn        PostgreSQL URL (empty: $DATABASE_URL); not needed with -observe
//	-role       the role campaigned for, a lock key (default leader-demo)
//	-value      what observers see of this instance (default host:pid)
//	-every      the job's period (default 1s)
//	-ttl        the term's lease TTL: how long a dead leader blocks the role (default 5s)
//	-instances  instances in this process, each with its own Locker (default 1)
//	-max-runs   a leader resigns after this many runs, to show a hand-over (default 0: never)
//	-for        stop after this long (default 0: until interrupted)
//	-observe    only print the leader as it changes; campaign for nothing
//
// It creates the distlock_fence and leader_demo_runs tables if missing and
// appends to leader_demo_runs; use a scratch database.
package main
