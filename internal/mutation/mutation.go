// Package mutation puts known, fixed bugs back into the library, one at a
// time, for the fault harness's mutation checks (cmd/internal/faults,
// TestMutations): a harness that cannot see a bug it is told is there
// proves nothing about the bugs it is not told about.
//
// In a normal build On is the constant false and every hook
// (`if mutation.On("name")`, commented `// mutation: name`) compiles away.
// Only a binary built with -tags distlock_mutations reads the environment
// variable DISTLOCK_MUTATION (a comma-separated list of names), once.
//
// The names: owner-reuse, token-restart, equal-token-accepted, no-giveback,
// zk-requested-timeout, redlock-no-repair, guard-skipped, etcd-no-keepalive,
// refresh-unordered, lease-unchecked, pg-token-counter.
package mutation

import "time"

// Pick returns mutant when the mutation name is on, else orig.
func Pick[T any](name string, mutant, orig T) T {
	if On(name) {
		return mutant
	}
	return orig
}

// Dur returns d when the mutation name is on, else 0.
func Dur(name string, d time.Duration) time.Duration {
	if On(name) {
		return d
	}
	return 0
}
