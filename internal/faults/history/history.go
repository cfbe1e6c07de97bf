// Package history is the record a fault-harness worker writes for each
// thing it does, one JSON line each, and the harness reads back to check.
// It is its own package so the worker links neither the harness nor the
// testing package.
package history

// Event is one line of a worker's log.
type Event struct {
	T      int64  `json:"t"`              // CLOCK_MONOTONIC ns when the event ended
	T0     int64  `json:"t0,omitempty"`   // CLOCK_MONOTONIC ns when the operation started
	TW     int64  `json:"tw,omitempty"`   // write: CLOCK_MONOTONIC ns just before the UPDATE was sent
	Worker int    `json:"w"`              // worker id
	Ev     string `json:"ev"`             // acquire, release, write, lost, cont, error, start, exit
	Token  int64  `json:"tok,omitempty"`  // fencing token of the lease involved
	Read   int64  `json:"read,omitempty"` // counter value read (write)
	Value  int64  `json:"val,omitempty"`  // counter value written (write)
	Result string `json:"res,omitempty"`  // write: ok, stale, error; lost: the lease's Err
	Err    string `json:"err,omitempty"`
	PID    int    `json:"pid,omitempty"` // start
}
