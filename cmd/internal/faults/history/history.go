// Package history is the record a fault-harness worker writes for each
// thing it does, one JSON line each, and the harness reads back to check.
// It is its own package so the worker links neither the harness nor the
// testing package.
package history

import (
	"strconv"
	"time"

	"github.com/distlock/distlock"
)

// Event is one line of a worker's log.
type Event struct {
	T      int64  `json:"t"`                // CLOCK_MONOTONIC ns when the event ended
	T0     int64  `json:"t0,omitempty"`     // CLOCK_MONOTONIC ns when the operation started
	TW     int64  `json:"tw,omitempty"`     // write: CLOCK_MONOTONIC ns just before the UPDATE was sent
	Worker int    `json:"w"`                // worker id
	Ev     string `json:"ev"`               // acquire, release, write, lost, cont, error, stopped (an Acquire cut short by SIGTERM), start, exit, stall (T0 to T: the process ran nothing, see the worker); election: abandon; observer: observe, observe-error
	Epoch  int64  `json:"epoch,omitempty"`  // acquire, write, abandon: the lease's Fence().Epoch, compared before Token
	Token  int64  `json:"tok,omitempty"`    // fencing token of the lease involved
	Holder string `json:"holder,omitempty"` // acquire, write: the lease's Fence().Holder
	Read   int64  `json:"read,omitempty"`   // counter value read (write)
	Value  int64  `json:"val,omitempty"`    // counter value written (write)
	Result string `json:"res,omitempty"`    // write: ok, stale, error; lost: the lease's Err
	// Valid (write): the lease still stood by its own account when the
	// result came back — see LeaseValid. A stale result with Valid set is a
	// legitimate write refused.
	Valid bool   `json:"valid,omitempty"`
	Err   string `json:"err,omitempty"`
	PID   int    `json:"pid,omitempty"` // start
	// Exp (lost, release): the lease's deadline (Lease.Expires) at that
	// moment, on CLOCK_MONOTONIC: the end of its local validity.
	Exp int64 `json:"exp,omitempty"`
	// Leader (election workload): acquire, the value the candidate
	// campaigned with; observe, the value the observer was told of.
	Leader string `json:"leader,omitempty"`
}

// CandidateValue is the value worker id campaigns with in the election
// workload, which observers report back.
func CandidateValue(id int) string { return "candidate-" + strconv.Itoa(id) }

// LeaseValid reports whether l still stands by its own account: it has not
// ended (Done, Err) and its deadline has not passed. A holder whose lease
// stands is entitled to write; one whose lease ended may be refused.
func LeaseValid(l *distlock.Lease) bool {
	select {
	case <-l.Done():
		return false
	default:
	}
	return l.Err() == nil && time.Now().Before(l.Expires())
}
