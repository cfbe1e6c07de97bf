package main

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testutil"
)

// devURLs reads the backend lines of a --urls file: name → URL.
func devURLs(t *testing.T, text string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] != "export" {
			got[f[0]] = f[1]
		}
	}
	return got
}

// hostsOf lists the host:port pairs of a backend URL.
func hostsOf(t *testing.T, raw string) []string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(u.Host, ",")
}

// waitURLs waits for path to exist, or fails the test.
func waitURLs(t *testing.T, path string, limit time.Duration, alive func() bool) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		if !alive() {
			t.Fatalf("dev-servers ended before writing %s", path)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not written within %v", path, limit)
	return ""
}

// Every printed URL opens and locks; at SIGTERM (ctx) every server stops.
func TestDevServersLockEachURL(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tmp := t.TempDir()
	urls, pids := filepath.Join(tmp, "urls"), filepath.Join(tmp, "pids")
	var out, errb testutil.SyncBuffer
	code := make(chan int, 1)
	args := []string{"dev-servers", "--ports", "any", "--pids", pids, "--urls", urls}
	go func() { code <- cli(ctx, args, strings.NewReader(""), &out, &errb) }()
	alive := func() bool { return len(code) == 0 }
	text := waitURLs(t, urls, 2*time.Minute, alive)
	got := devURLs(t, text)
	procs := devProcs(t, pids)
	for _, name := range []string{"redis", "redlock", "etcd", "zookeeper", "postgres"} {
		u, ok := got[name]
		if !ok {
			if os.Getenv("CI") == "true" {
				t.Errorf("no %s URL in:\n%s\nstderr:\n%s", name, text, errb.String())
			} else {
				t.Logf("%s not started (not installed?): %s", name, errb.String())
			}
			continue
		}
		lockOnce(t, name, u)
	}
	if !strings.Contains(text, "export DISTLOCK_URL='"+got["redis"]+"'") {
		t.Errorf("no export line for DISTLOCK_URL in:\n%s", text)
	}
	cancel()
	select {
	case c := <-code:
		if c != exitOK {
			t.Errorf("dev-servers exited %d after SIGTERM; stderr:\n%s", c, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("dev-servers still running a minute after its ctx ended")
	}
	checkGone(t, got, procs)
}

// devProcs reads a --pids file: "kind pid address" lines.
func devProcs(t *testing.T, path string) [][3]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var procs [][3]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("pids line %q: want kind, pid, address", line)
		}
		procs = append(procs, [3]string{f[0], f[1], f[2]})
	}
	return procs
}

// checkGone fails the test if a server process still runs or a URL's
// address still accepts connections.
func checkGone(t *testing.T, urls map[string]string, procs [][3]string) {
	t.Helper()
	for _, p := range procs {
		if alive(p[1]) {
			t.Errorf("%s pid %s (%s) still runs after stop", p[0], p[1], p[2])
		}
	}
	for name, u := range urls {
		for _, h := range hostsOf(t, u) {
			if c, err := net.DialTimeout("tcp", h, time.Second); err == nil {
				c.Close()
				t.Errorf("%s at %s still accepts connections after stop", name, h)
			}
		}
	}
}

// alive reports whether process pid runs (a zombie, which no longer runs,
// does not count).
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// lockOnce opens u and takes and releases a lock on it.
func lockOnce(t *testing.T, name, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	l, err := distlock.Open(ctx, u)
	if err != nil {
		t.Errorf("%s: Open(%s): %v", name, u, err)
		return
	}
	defer l.Close()
	lease, err := l.TryAcquire(ctx, "dev-servers-test")
	if err != nil {
		t.Errorf("%s: TryAcquire: %v", name, err)
		return
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("%s: Release: %v", name, err)
	}
}

// The script starts the servers in the background, reports them running,
// and stops them all.
func TestDevServersScript(t *testing.T) {
	script, err := filepath.Abs("../../scripts/dev-servers.sh")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	run := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // the cleanup runs it after t.Context ends
		defer cancel()
		cmd := exec.CommandContext(ctx, script, args...)
		cmd.Env = append(os.Environ(), "DISTLOCK_DEV_DIR="+state, "DISTLOCK_DEV_PORTS=any")
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s %v: %v", script, args, err)
		}
		return string(out), 0
	}
	t.Cleanup(func() { run("stop") })
	if out, code := run("bogus"); code != exitUsage || !strings.Contains(out, "usage:") {
		t.Errorf("bogus: exit %d, %q; want %d and the usage", code, out, exitUsage)
	}
	out, code := run("start")
	if code != 0 || !strings.Contains(out, "redis://") {
		t.Fatalf("start: exit %d:\n%s", code, out)
	}
	pid, err := os.ReadFile(filepath.Join(state, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	if again, code := run("start"); code != 0 || !strings.Contains(again, "already running") {
		t.Errorf("a second start: exit %d:\n%s; want the running servers, not new ones", code, again)
	}
	if st, _ := run("status"); !strings.Contains(st, "running (pid "+strings.TrimSpace(string(pid))) {
		t.Errorf("status: %q", st)
	}
	procs := devProcs(t, filepath.Join(state, "pids"))
	if len(procs) == 0 {
		t.Fatal("no server in the pids file")
	}
	if out, code := run("stop"); code != 0 || !strings.Contains(out, "stopped") {
		t.Errorf("stop: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state dir left after stop: %v", err)
	}
	checkGone(t, devURLs(t, out), procs)
}
