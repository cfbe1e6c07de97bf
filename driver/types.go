package driver

import (
	"errors"
	"fmt"
)

// Sentinel errors that backends return and this package's helpers make
// (package distlock re-exports them, beside its own). Check them with
// errors.Is.
var (
	// ErrUnavailable: the lock service could not be reached (refused,
	// unresolvable, timed out while connecting). The message names the
	// address.
	ErrUnavailable = errors.New("distlock: lock service unavailable")
	// ErrAccessDenied: the lock service refused the client: a wrong or
	// missing password or certificate, a TLS handshake it rejected, or a
	// permission (ACL, role) the operation needs and the client lacks. It
	// is an answer, not an outage: never retried, and never ErrUnavailable.
	ErrAccessDenied = errors.New("distlock: access denied")
	// ErrInvalid matches every invalid-input error (distlock's
	// ErrInvalidKey and ErrInvalidTTL too).
	ErrInvalid = errors.New("distlock: invalid argument")
	// ErrInvalidOption: an option has a value that cannot work, or was
	// passed where it does not apply and the compiler could not tell (a
	// backend's option to another backend or to distlock.New).
	ErrInvalidOption error = &invalidError{"invalid option"}
	// ErrInvalidURL: a URL that cannot be parsed, has no host or a bad
	// port, or whose scheme no backend registered.
	ErrInvalidURL error = &invalidError{"invalid URL"}
)

// invalidError is a sentinel that also matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "distlock: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Unavailable wraps err, the failure to reach addr, so that it matches
// ErrUnavailable and names the address.
func Unavailable(addr string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, addr, err)
}

// AccessDenied wraps err, the refusal of addr to let the client in or to
// let it do what it asked, so that it matches ErrAccessDenied and names the
// address (never a secret).
func AccessDenied(addr string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrAccessDenied, addr, err)
}

// WaitMode says how a backend's waiters learn that a key became free, and so
// which of Backend.Lock and Backend.Subscribe the portable layer calls.
type WaitMode string

const (
	// WaitPoll: waiters retry with jittered exponential back-off.
	WaitPoll WaitMode = "poll"
	// WaitNotify: the releaser pushes a notice (e.g. Redis pub/sub) and
	// waiters fall back to a bounded poll in case a notice is missed.
	WaitNotify WaitMode = "notify"
	// WaitQueue: waiters join a server-side queue and watch their
	// predecessor (etcd, ZooKeeper); the server wakes exactly the next one.
	WaitQueue WaitMode = "queue"
)

// Guarantees is what a backend declares about itself; distlock.Guarantees
// documents each claim. A claim no test checks is left at its zero value.
type Guarantees struct {
	Backend, TokenSource string
	Wait                 WaitMode
	FIFO                 bool
	FailuresTolerated    int
	ClockDependent       bool
	RestartLosesLocks    bool
	SessionTTL           bool
	SingleProcess        bool
	Notes                []string
}
