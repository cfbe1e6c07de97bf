package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

const versionHelp = `
Usage: distlock version   (or distlock --version)

Prints distlock's module version and the Go version it was built with. A
build from a checkout (go build, go run) has no module version: it prints
"(devel)" and the VCS revision, "+modified" when the tree had changes.
`

func cmdVersion(_ context.Context, args []string, s stdio) int {
	fs := newFlags("version", versionHelp, s)
	if code, ok := parseFlags(fs, args, s); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(s, "version", "unexpected arguments %q", fs.Args())
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintf(s.out, "distlock %s %s\n", versionString(bi), runtime.Version())
	return exitOK
}

// versionString is the main module's version, or "(devel)" followed by the
// VCS revision and a modified mark when the build has no version.
func versionString(bi *debug.BuildInfo) string {
	if bi == nil {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	v := "(devel)"
	var rev, modified string
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value
		case "vcs.modified":
			modified = st.Value
		}
	}
	if rev != "" {
		v += " " + rev
		if modified == "true" {
			v += "+modified"
		}
	}
	return v
}
