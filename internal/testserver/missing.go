package testserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// ErrMissing matches the error of Start and StartCluster when the machine
// lacks what a server needs (its binary, or a user to run it as).
var ErrMissing = errors.New("testserver: server not installed")

// missingError says what is missing; it matches ErrMissing.
type missingError struct{ what string }

func (e *missingError) Error() string {
	return "testserver: " + e.what + "; run `make setup` (scripts/setup.sh) to install the servers"
}

func (e *missingError) Is(target error) bool { return target == ErrMissing }

// lookBinary returns the first of paths that is an executable file (a bare
// name is looked up in PATH), or a *missingError.
func lookBinary(name string, paths ...string) (string, error) {
	for _, p := range paths {
		if !strings.Contains(p, "/") {
			if lp, err := exec.LookPath(p); err == nil {
				return lp, nil
			}
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", &missingError{fmt.Sprintf("%s not found", name)}
}

// mustSpec returns sp, or skips or fails the test for err (see missing).
func mustSpec(t testing.TB, sp spec, err error) spec {
	t.Helper()
	var me *missingError
	switch {
	case errors.As(err, &me):
		missing(t, me.what)
	case err != nil:
		t.Fatalf("%v", err)
	}
	return sp
}

// missing skips the test because the machine lacks what a server needs, or
// fails it when CI is "true": CI must not silently skip the integration tests.
func missing(t testing.TB, what string) {
	t.Helper()
	msg := what + "; run `make setup` (scripts/setup.sh) to install the test servers"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
