// Package memory is the in-process backend: locks shared by the goroutines
// of one process. It is the reference implementation of the distlock
// contract and the backend behind "mem://" URLs.
//
// Guarantees: mutual exclusion and strictly increasing tokens per key within
// one process, TTL expiry by the process's monotonic clock, waiters woken by
// an in-process notice. A token is max(counter + 1, the wall clock in µs),
// so a restarted process keeps handing out larger tokens than before (and a
// fenced resource accepts its writes) as long as the wall clock does not
// step back by more than the restart takes. It does not coordinate
// processes or hosts: use it in tests, in single-replica programs, and as
// the default when no URL is set.
//
// Lockers made with the same Store see the same locks, as clients of one
// server would. "mem://" uses a process-wide default Store; "mem://name" a
// named one.
package memory
