//go:build !distlock_mutations

package mutation

// Enabled is false: this build carries no mutation.
const Enabled = false

// On reports whether the named mutation is switched on: never, in a build
// without the distlock_mutations tag.
func On(name string) bool { return false }
