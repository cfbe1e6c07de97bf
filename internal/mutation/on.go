//go:build distlock_mutations

package mutation

import (
	"os"
	"strings"
	"sync"
)

// Enabled is true: this build reads DISTLOCK_MUTATION.
const Enabled = true

var active = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("DISTLOCK_MUTATION"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			m[n] = true
		}
	}
	return m
})

// On reports whether the named mutation is listed in DISTLOCK_MUTATION.
func On(name string) bool { return active()[name] }
