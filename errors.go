package distlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

// Sentinel errors. Check them with errors.Is: the errors distlock returns
// wrap them, together with the backend's own error where there is one.
var (
	// ErrNotAcquired: the key is held by someone else (TryAcquire), or a
	// wait ended before the lock was taken (Acquire; then the error also
	// matches ctx.Err()).
	ErrNotAcquired = errors.New("distlock: lock not acquired")

	// ErrNotHeld: Refresh or Release on a lease that no longer owns its
	// key — released already, expired, or taken over by another holder.
	ErrNotHeld = errors.New("distlock: lock not held")

	// ErrLeaseLost: the lease ended without a Release: its validity ran out
	// without a successful refresh, the server said the key is no longer
	// ours, the backend's session expired, or a Release failed midway.
	ErrLeaseLost = errors.New("distlock: lease lost")

	// ErrReleased is what Lease.Err returns after a successful Release.
	ErrReleased = errors.New("distlock: lease released")

	// ErrClosed: the Locker was closed.
	ErrClosed = errors.New("distlock: locker closed")

	// ErrUnavailable: the lock service could not be reached (a refused or
	// unresolvable address, a server that does not answer in time). The
	// message names the address. A waiting Acquire retries it until its
	// context ends.
	ErrUnavailable = driver.ErrUnavailable

	// ErrAccessDenied: the lock service refused the client — a wrong or
	// missing password or certificate, a rejected TLS handshake, or a
	// missing permission (ACL, role). Unlike ErrUnavailable it is not
	// retried: a waiting Acquire returns it at once.
	ErrAccessDenied = driver.ErrAccessDenied

	// ErrUnsupported: the backend lacks what the call needs (Inspect or
	// Watch on a third-party backend that implements no Inspect).
	ErrUnsupported = driver.ErrUnsupported

	// ErrInvalid matches every invalid-input error below.
	ErrInvalid = driver.ErrInvalid

	// ErrInvalidKey: the key is empty, too long, not UTF-8, or holds
	// control characters.
	ErrInvalidKey error = &invalidError{"invalid key"}

	// ErrInvalidTTL: the TTL is zero, negative or too long.
	ErrInvalidTTL error = &invalidError{"invalid TTL"}

	// ErrInvalidOption: an option has a value that cannot work, or was
	// passed where it does not apply and the compiler could not tell
	// (another backend's option, a backend's option to New).
	ErrInvalidOption = driver.ErrInvalidOption

	// ErrInvalidURL: Open was given a URL it cannot parse, without a host
	// or with a bad port, or whose scheme no backend registered.
	ErrInvalidURL = driver.ErrInvalidURL
)

// invalidError is a sentinel that also matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "distlock: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// HeldError is returned (wrapped) by a failed attempt on a key someone else
// holds. It matches ErrNotAcquired. RetryAfter, when positive, is how long the
// current holder's lock has left, as the server reported it.
type HeldError struct {
	Key        string
	RetryAfter time.Duration
}

// Error says the key is held and, when known, for how long yet.
func (e *HeldError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("distlock: key %q is held (expires in %v)", e.Key, e.RetryAfter)
	}
	return fmt.Sprintf("distlock: key %q is held", e.Key)
}

// Is makes a HeldError match ErrNotAcquired.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// waitEnded is the error of an Acquire cut short by its context: it matches
// both ErrNotAcquired and the context's error.
func waitEnded(key string, cause error) error {
	return fmt.Errorf("%w: waiting for %q: %w", ErrNotAcquired, key, cause)
}

// notHeld builds the error of a Refresh or Release on a lease that ended;
// when the lease ended by loss it matches ErrLeaseLost too.
func notHeld(key string, end error) error {
	if end == nil || errors.Is(end, ErrReleased) {
		return fmt.Errorf("%w: %q: lease already released", ErrNotHeld, key)
	}
	if errors.Is(end, ErrNotHeld) {
		return end
	}
	return fmt.Errorf("%w: %w", ErrNotHeld, end)
}
