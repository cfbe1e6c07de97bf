package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
		{[]string{"run", "--key", "k", "--ttl", "-1s", "--", "true"}, exitUsage, "--ttl"},
		{[]string{"run", "--key", "k", "--bogus", "--", "true"}, exitUsage, "flag provided but not defined"},
		{[]string{"run", "--url", "nosuch://x", "--key", "k", "--", "true"}, exitUsage, `unknown scheme "nosuch"`},
		{[]string{"run", "--url", "mem://?bad=1", "--key", "k", "--", "true"}, exitUsage, "unknown parameter"},
		{[]string{"run", "--key", "", "--", "true"}, exitUsage, "--key is required"},
		{[]string{"run", "--key", "bad\x00key", "--", "true"}, exitUsage, "invalid key"},
		{[]string{"bench", "--duration", "0s"}, exitUsage, "--duration"},
		{[]string{"bench", "--repeat", "0"}, exitUsage, "--repeat"},
		{[]string{"bench", "--workers", "2,x"}, exitUsage, "want integers"},
		{[]string{"bench", "--measure", "speed"}, exitUsage, "unknown measurement"},
		{[]string{"bench", "--url", "nosuch://x"}, exitUsage, "unknown scheme"},
		{[]string{"bench", "extra"}, exitUsage, "unexpected argument"},
	} {
		r := runCLI(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("distlock %q: code %d, want %d and output containing %q; got\n%s%s", tc.args, r.code, tc.code, tc.want, r.stdout, r.stderr)
		}
	}
}
