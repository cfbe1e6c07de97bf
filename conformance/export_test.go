package conformance

import (
	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// WithWrappers returns h whose backends are wrapped by backend above the
// crash switch and whose Lockers are wrapped by locker (either may be nil):
// the suite's tests break rules there.
func WithWrappers(h Harness, backend func(driver.Backend) driver.Backend, locker func(distlock.Locker) distlock.Locker) Harness {
	h.wrapBackend, h.wrapLocker = backend, locker
	return h
}

// Crashable exposes the crash switch to the suite's tests.
type Crashable = crashable

// Crash flips c's switch.
func (c *crashable) Crash() { c.crash() }
