package testutil

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Goroutines returns how many goroutines have a frame in one of the given
// packages (import path prefixes), leaving out the calling test's own
// goroutines, with their stacks. Leak checks count these rather than
// runtime.NumGoroutine: a client's transport (gRPC's connection
// goroutines) may start and stop goroutines of its own at any time.
func Goroutines(packages ...string) (int, string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var n int
	var dump strings.Builder
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*T).Run") ||
			strings.Contains(g, "testing.runTests") || strings.Contains(g, "testing.(*M).Run") {
			continue
		}
		for _, p := range packages {
			if strings.Contains(g, p) {
				n++
				dump.WriteString(g)
				dump.WriteString("\n\n")
				break
			}
		}
	}
	return n, dump.String()
}

// CheckNoGoroutines fails t unless, within five seconds, no more goroutines
// with a frame in packages are left than base.
func CheckNoGoroutines(t testing.TB, base int, packages ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, dump := Goroutines(packages...)
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of %v left, %d before:\n%s", n, packages, base, dump)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
