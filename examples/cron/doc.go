// Command cron runs a job once per schedule slot across several replicas.
// Every replica has its own Locker (as separate processes would) and wakes
// at each slot boundary; all of them call Locker.Do on the slot's key,
// "cron:report:<slot start>", and the one that gets it runs the job.
//
//	go run ./examples/cron                                  # mem://
//	go run ./examples/cron -url redis://127.0.0.1:6379 -replicas 5 -ticks 10 -every 1s
//	DISTLOCK_URL=etcd://127.0.0.1:2379 go run ./examples/cron
//
// Why a slot runs once, not once per replica:
//
//   - The winner keeps the slot's key until the slot ends, even when the job
//     is done sooner (Do keeps the lease renewed meanwhile). Releasing early
//     would let a replica that woke late take the free key and run the slot
//     again.
//   - A replica that gets the key after the slot's start window (the first
//     three quarters of the slot) does not run the job. In the normal case
//     that only happens just after the winner released at the slot's end;
//     the check makes that race harmless.
//   - The others keep waiting in Do until the slot ends. If the winner dies
//     or loses its lease (Do cancels its job's context at once), its key
//     frees at the TTL and a standby takes over, if still inside the start
//     window.
//
// In a real deployment each replica is a process (a pod, a VM) running this
// loop with DISTLOCK_URL naming the shared Redis, etcd or ZooKeeper, and:
//
//   - Slots come from each host's wall clock, so clock skew between hosts
//     must stay well below a quarter of the period (use NTP), or a replica
//     with a slow clock could start a slot another has already finished.
//   - The lock guarantees one runner at a time, not one run per slot: a
//     runner that stalls past its lease (GC pause, partition) and the
//     standby that replaced it may both act. Record the run where the job
//     writes, guarded by the lease's fencing token (see examples/fencing),
//     for example a row keyed by the slot that only the first token may
//     insert. This example keeps that record in memory to check the result,
//     which is only meaningful because its replicas share one process.
//   - The job gets the rest of its slot; a job longer than the period needs
//     a longer slot or a key that outlives it.
package main
