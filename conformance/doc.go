// Package conformance is the test suite every distlock backend must pass —
// ours and third-party ones. It is the definition of a correct backend.
//
// A backend's test builds a Harness (how to make Lockers on one shared
// server, how to crash one, how to force a key's expiry) and calls Run:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness{NewLocker: ..., Crash: ..., ForceExpire: ...})
//	}
//
// Each case checks one named rule and, like testing/fstest, reports a broken
// rule as an error that names it; Check returns them all, for tools and for
// the suite's own tests. Cases the harness cannot drive (no Crash, no
// ForceExpire, a session-bound backend) are skipped with the reason.
package conformance
