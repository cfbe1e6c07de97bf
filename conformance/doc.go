// Package conformance is the test suite every distlock backend must pass —
// ours and third-party ones. It is the definition of a correct backend.
//
// A backend's test builds a Harness (how to make backends on one shared
// server, how to force a key's expiry, and what else a crash must stop)
// and calls Run:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness{NewBackend: ..., ForceExpire: ...})
//	}
//
// The suite makes a Locker of each backend over a switch that crashes it.
//
// Each case checks one named rule and, like testing/fstest, reports a broken
// rule as an error that names it; Check returns them all, for tools and for
// the suite's own tests. Cases the harness cannot drive (no
// ForceExpire, a session-bound backend) are skipped with the reason.
package conformance
