package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testutil"
)

// binPath is the distlock binary built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	// bench's crash measurement re-executes its own program as "distlock
	// hold"; under go test that program is the test binary.
	if os.Getenv(runAsCLI) != "" {
		os.Exit(cli(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	dir, err := os.MkdirTemp("", "distlock-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "distlock")
	out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	selfExe = func() (string, error) { return binPath, nil }
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is the outcome of one in-process cli call.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the CLI in-process with a liveness bound.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb testutil.SyncBuffer
	code := cli(ctx, args, strings.NewReader(""), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// startCLI runs the CLI in-process in the background; wait returns its result.
func startCLI(args ...string) (wait func() result, done <-chan struct{}) {
	ch := make(chan struct{})
	var r result
	var out, errb testutil.SyncBuffer
	go func() {
		defer close(ch)
		// A liveness bound: cancelling makes run stop its command.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r.code = cli(ctx, args, strings.NewReader(""), &out, &errb)
	}()
	return func() result {
		<-ch
		r.stdout, r.stderr = out.String(), errb.String()
		return r
	}, ch
}

// waitFile waits (bounded) until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUsage(t *testing.T) {
	t.Setenv("DISTLOCK_URL", "")
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{nil, exitUsage, "Commands:"},
		{[]string{"--help"}, exitOK, "Commands:"},
		{[]string{"help", "run"}, exitOK, "DISTLOCK_TOKEN"},
		{[]string{"nope"}, exitUsage, `unknown command "nope"`},
		{[]string{"run", "--help"}, exitOK, "Exit status"},
		{[]string{"bench", "--help"}, exitOK, "handoff"},
		{[]string{"compare", "-h"}, exitOK, "guarantees"},
		{[]string{"run", "--key", "k"}, exitUsage, "no command given"},
		{[]string{"run", "--", "true"}, exitUsage, "--key is required"},
		{[]string{"run", "--key", "k", "--ttl", "-1s", "--", "true"}, exitUsage, "--ttl -1s out of range"},
		{[]string{"run", "--key", "k", "--bogus", "--", "true"}, exitUsage, "unknown flag: --bogus"},
		{[]string{"run", "--url", "nosuch://x", "--key", "k", "--", "true"}, exitUsage, `unknown scheme "nosuch"`},
		{[]string{"run", "--url", "mem://?bad=1", "--key", "k", "--", "true"}, exitUsage, "unknown parameter"},
		{[]string{"run", "--key", "", "--", "true"}, exitUsage, "--key is required"},
		{[]string{"run", "--url", "mem://", "--key", "bad\x00key", "--", "true"}, exitUsage, "invalid key"},
		{[]string{"run", "--key", "k", "--", "true"}, exitUsage, "pass --url or set DISTLOCK_URL"},
		{[]string{"run", "--url", "", "--key", "k", "--", "true"}, exitUsage, "--url is empty"},
		{[]string{"run", "--url", "mem://", "--key", "k", "-n", "--wait", "1s", "--", "true"}, exitUsage, "contradict"},
		{[]string{"run", "--url", "mem://", "--key", "k", "--wait", "-1s", "--", "true"}, exitUsage, "negative"},
		{[]string{"run", "--help"}, exitOK, "75 not acquired"},
		{[]string{"bench", "--help"}, exitOK, "69 a backend unreachable"},
		{[]string{"compare", "--help"}, exitOK, "77 a backend refused"},
		{[]string{"fence", "--help"}, exitOK, "65 refused"},
		{[]string{"--help"}, exitOK, "--version"},
		{[]string{"bench", "--duration", "0s"}, exitUsage, "--duration"},
		{[]string{"bench", "--repeat", "0"}, exitUsage, "--repeat"},
		{[]string{"bench", "--workers", "2,x"}, exitUsage, "want integers"},
		{[]string{"bench", "--measure", "speed"}, exitUsage, "unknown measurement"},
		{[]string{"bench", "--url", "nosuch://x"}, exitUsage, "unknown scheme"},
		{[]string{"bench", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"hold", "--key", "k"}, exitUsage, "pass --url or set DISTLOCK_URL"},
	} {
		r := runCLI(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("distlock %q: code %d, want %d and output containing %q; got\n%s%s", tc.args, r.code, tc.code, tc.want, r.stdout, r.stderr)
		}
	}
}

// TestFlagErrors: flag errors are one line naming the flag in its
// documented --long form, then where to find the usage.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the whole of stderr
	}{
		{[]string{"run", "--ttl", "soon", "--key", "k"},
			`distlock run: invalid argument "soon" for "--ttl" flag: must be a duration like "30s" or "5m"`},
		{[]string{"run", "--bogus"}, "distlock run: unknown flag: --bogus"},
		{[]string{"run", "--key"}, "distlock run: flag needs an argument: --key"},
		// The single-dash long form of the standard flag package is gone:
		// say which flag was meant.
		{[]string{"run", "-ttl", "3s"}, `distlock run: unknown shorthand flag: 't' in -ttl (did you mean --ttl?)`},
		{[]string{"run", "-url=mem://"}, `distlock run: unknown shorthand flag: 'u' in -url=mem:// (did you mean --url?)`},
		{[]string{"bench", "--repeat", "x"}, `distlock bench: invalid argument "x" for "--repeat" flag: must be an integer`},
		{[]string{"bench", "--workers", "0"}, `distlock bench: invalid argument "0" for "--workers" flag: "0": want integers in 1..256`},
	} {
		r := runCLI(t, tc.args...)
		cmd := tc.args[0]
		want := tc.want + "\nRun \"distlock " + cmd + " --help\" for usage.\n"
		if r.code != exitUsage || r.stderr != want || r.stdout != "" {
			t.Errorf("distlock %q: code %d, stdout %q, stderr\n%s\nwant code %d, stderr\n%s", tc.args, r.code, r.stdout, r.stderr, exitUsage, want)
		}
	}
}

// TestHelp: -h, -help and --help print the help to stdout and exit 0;
// flags show as "--name type" with each default once.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"run", "--help"}, {"run", "-h"}, {"run", "-help"}, {"help", "run"}, {"run", "--key", "k", "--help"}} {
		r := runCLI(t, args...)
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("distlock %q: code %d, stderr %q; want 0 and nothing on stderr", args, r.code, r.stderr)
		}
		for _, want := range []string{
			"Usage: distlock run --url URL --key KEY",
			"\n  -h, --help ",
			"\n      --url URL ",
			"\n      --ttl duration ",
			"\n      --wait duration ",
			"\n      --foreground ",
			"\n  -q, --quiet ",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("distlock %q: help lacks %q:\n%s", args, want, r.stdout)
			}
		}
		flat := strings.Join(strings.Fields(r.stdout), " ") // unwrapped
		for _, bad := range []string{"help requested", " -ttl", "[=true", `(default "`, "else mem://"} {
			if strings.Contains(flat, bad) {
				t.Errorf("distlock %q: help contains %q:\n%s", args, bad, r.stdout)
			}
		}
		if n := strings.Count(flat, "(default"); n != 3 { // --url's $DISTLOCK_URL, --ttl, --grace
			t.Errorf("distlock %q: %d defaults in the help, want 3 (--url, --ttl, --grace):\n%s", args, n, r.stdout)
		}
		if !strings.Contains(flat, "(default 15s)") || !strings.Contains(flat, "(default 10s)") {
			t.Errorf("distlock %q: help lacks the --ttl and --grace defaults:\n%s", args, r.stdout)
		}
	}
	r := runCLI(t, "bench", "--help")
	for _, want := range []string{"\n      --workers ints ", "(default 2,8,32)", "\n      --json FILE "} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Errorf("bench --help: code %d, lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
}

// TestVersion: --version and version print distlock's version and Go's.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		r := runCLI(t, args...)
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "distlock ") || !strings.HasSuffix(r.stdout, " "+runtime.Version()+"\n") || r.stderr != "" {
			t.Errorf("distlock %q: code %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, "version", "extra"); r.code != exitUsage {
		t.Errorf("version extra: code %d, want %d", r.code, exitUsage)
	}
	out, err := exec.Command(binPath, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "distlock ") || !strings.Contains(string(out), runtime.Version()) {
		t.Errorf("the binary's --version: %q, %v", out, err)
	}
}

func TestVersionString(t *testing.T) {
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{nil, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}}, "(devel) abc123"},
		{&debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}, "(devel) abc123+modified"},
	} {
		if got := versionString(tc.bi); got != tc.want {
			t.Errorf("versionString(%+v) = %q, want %q", tc.bi, got, tc.want)
		}
	}
}
