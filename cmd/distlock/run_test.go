package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/memory"
)

// memURL returns a mem:// URL on a Store private to the test.
func memURL(t *testing.T) (string, *memory.Store) {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + randHex(4)
	return "mem://" + name, memory.Named(name)
}

func TestRunPassesTokenKeyAndURL(t *testing.T) {
	url, _ := memURL(t)
	// A first holder takes token 1, so the command's token must be later.
	l, err := distlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first, err := l.TryAcquire(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "run", "--url", url, "--key", "job", "--", "sh", "-c", `echo "$DISTLOCK_TOKEN|$DISTLOCK_KEY|$DISTLOCK_URL|$DISTLOCK_HOLDER"`)
	if r.code != 0 {
		t.Fatalf("code %d, stderr:\n%s", r.code, r.stderr)
	}
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(parts) != 4 {
		t.Fatalf("child printed %q", r.stdout)
	}
	// The fence needs the holder beside the token; another lease's differs.
	if parts[3] == "" || parts[3] == first.Fence().Holder {
		t.Errorf("DISTLOCK_HOLDER = %q, want this lease's own holder id (the earlier lease's is %q)", parts[3], first.Fence().Holder)
	}
	tok, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || distlock.Token(tok) <= first.Token() {
		t.Errorf("DISTLOCK_TOKEN = %q, want a token above the earlier holder's %d", parts[0], first.Token())
	}
	if parts[1] != "job" || parts[2] != url {
		t.Errorf("DISTLOCK_KEY, DISTLOCK_URL = %q, %q; want job, %s", parts[1], parts[2], url)
	}
	// Released after the command: the key is free.
	if again, err := l.TryAcquire(context.Background(), "job"); err != nil {
		t.Errorf("key still held after run returned: %v", err)
	} else {
		_ = again.Release(context.Background())
	}
}

func TestRunDefaultURLFromEnv(t *testing.T) {
	url, _ := memURL(t)
	t.Setenv("DISTLOCK_URL", url)
	r := runCLI(t, "run", "--key", "k", "--", "sh", "-c", `echo "$DISTLOCK_URL"`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != url {
		t.Errorf("code %d, child saw DISTLOCK_URL=%q, want %s\n%s", r.code, r.stdout, url, r.stderr)
	}
}

// TestRunSecondWaits: a second run on a held key waits, then runs with a
// later token once the first command has exited.
func TestRunSecondWaits(t *testing.T) {
	url, _ := memURL(t)
	dir := t.TempDir()
	started, proceed := filepath.Join(dir, "started"), filepath.Join(dir, "proceed")
	script := fmt.Sprintf(`touch %q; while [ ! -e %q ]; do sleep 0.02; done; echo "$DISTLOCK_TOKEN"`, started, proceed)
	wait1, done1 := startCLI("run", "-q", "--url", url, "--key", "k", "--", "sh", "-c", script)
	waitFile(t, started)

	wait2, done2 := startCLI("run", "-q", "--url", url, "--key", "k", "--", "sh", "-c", `echo "$DISTLOCK_TOKEN"`)
	select {
	case <-done2:
		t.Fatalf("second run finished while the first held the lock: %+v", wait2())
	case <-done1:
		t.Fatalf("first run ended early: %+v", wait1())
	case <-time.After(300 * time.Millisecond):
	}
	if err := os.WriteFile(proceed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r1, r2 := wait1(), wait2()
	if r1.code != 0 || r2.code != 0 {
		t.Fatalf("codes %d, %d\n%s\n%s", r1.code, r2.code, r1.stderr, r2.stderr)
	}
	t1, _ := strconv.Atoi(strings.TrimSpace(r1.stdout))
	t2, _ := strconv.Atoi(strings.TrimSpace(r2.stdout))
	if t1 <= 0 || t2 <= t1 {
		t.Errorf("tokens %q then %q: want positive and increasing", r1.stdout, r2.stdout)
	}
}

func TestRunWaitTimeout(t *testing.T) {
	url, _ := memURL(t)
	l, err := distlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	r := runCLI(t, "run", "--url", url, "--key", "k", "--wait", "100ms", "--", "sh", "-c", "echo ran")
	if r.code != exitNotAcquired || strings.Contains(r.stdout, "ran") {
		t.Errorf("code %d (want %d), stdout %q, stderr %s", r.code, exitNotAcquired, r.stdout, r.stderr)
	}
	// The cause run set, once, rather than "context deadline exceeded".
	if want := "distlock run: \"k\" not acquired: --wait 100ms ran out\n"; r.stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
	}
}

// TestRunNeedsURL: with neither --url nor $DISTLOCK_URL, run refuses
// rather than lock an in-process mem:// that excludes no other run; mem://
// asked for by name is used.
func TestRunNeedsURL(t *testing.T) {
	t.Setenv("DISTLOCK_URL", "")
	ran := filepath.Join(t.TempDir(), "ran")
	r := runCLI(t, "run", "--key", "k", "--", "touch", ran)
	want := "distlock run: no backend URL: pass --url or set DISTLOCK_URL, e.g. --url redis://127.0.0.1:6379 (--url mem:// locks only within this one process)\n" +
		"Run \"distlock run --help\" for usage.\n"
	if r.code != exitUsage || r.stderr != want {
		t.Errorf("code %d, stderr:\n%s\nwant code %d, stderr:\n%s", r.code, r.stderr, exitUsage, want)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran without a backend URL")
	}
	if r := runCLI(t, "run", "-q", "--url", "mem://", "--key", "k", "--", "touch", ran); r.code != 0 {
		t.Errorf("--url mem://: code %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Errorf("--url mem://: the command did not run: %v", err)
	}
}

// TestRunTTLPrecedence: the URL's ttl= holds unless --ttl is on the command
// line, even when --ttl names the default value; without either, 15s.
func TestRunTTLPrecedence(t *testing.T) {
	url, _ := memURL(t)
	for _, tc := range []struct {
		query string
		flags []string
		want  string
	}{
		{"", nil, "15s"},
		{"", []string{"--ttl", "5s"}, "5s"},
		{"?ttl=3s", nil, "3s"},
		{"?ttl=3s", []string{"--ttl", "5s"}, "5s"},
		{"?ttl=3s", []string{"--ttl=15s"}, "15s"}, // set explicitly, though equal to the default
		{"?ttl=3s&renew_interval=1s", nil, "3s"},
	} {
		args := append([]string{"run", "--url", url + tc.query, "--key", "k"}, tc.flags...)
		r := runCLI(t, append(args, "--", "true")...)
		line := fmt.Sprintf("distlock run: acquired \"k\" (token %%d, ttl %s)\n", tc.want)
		var tok int
		if n, _ := fmt.Sscanf(r.stderr, line, &tok); r.code != 0 || n != 1 || fmt.Sprintf(line, tok) != r.stderr {
			t.Errorf("distlock %q: code %d, stderr:\n%s\nwant the lease's TTL %s, stderr %q", args, r.code, r.stderr, tc.want, line)
		}
	}
}

// TestRunLeaseLost: when the backend expires the lease, the command gets
// SIGTERM and distlock exits 70.
func TestRunLeaseLost(t *testing.T) {
	url, store := memURL(t)
	started := filepath.Join(t.TempDir(), "started")
	script := fmt.Sprintf(`trap 'echo got-term; exit 0' TERM; touch %q; while :; do sleep 0.02; done`, started)
	wait, _ := startCLI("run", "--url", url, "--key", "k", "--grace", "20s", "--", "sh", "-c", script)
	waitFile(t, started)
	if !store.ForceExpire("k") {
		t.Fatal("key not held while the command runs")
	}
	r := wait()
	if r.code != exitLeaseLost {
		t.Errorf("code %d, want %d", r.code, exitLeaseLost)
	}
	if !strings.Contains(r.stdout, "got-term") {
		t.Errorf("command did not get SIGTERM; stdout %q stderr %s", r.stdout, r.stderr)
	}
	// Said once, with the library's reason, without its "distlock: " twice.
	want := regexp.MustCompile(`^distlock run: lease lost: "k" \(token \d+\): the backend reported it gone \(session or lease ended\); sending SIGTERM to the command \(SIGKILL in 20s\)$`)
	var ours []string // the command's shell may add "Terminated"
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "distlock") {
			ours = append(ours, l)
		}
	}
	if len(ours) != 2 || !strings.HasPrefix(ours[0], "distlock run: acquired") || !want.MatchString(ours[1]) {
		t.Errorf("stderr:\n%s\nwant an \"acquired\" line, then\n%s", r.stderr, want)
	}
}

// TestRunLeaseLostKill: a command that ignores SIGTERM is killed after the grace.
func TestRunLeaseLostKill(t *testing.T) {
	url, store := memURL(t)
	started := filepath.Join(t.TempDir(), "started")
	script := fmt.Sprintf(`trap '' TERM; touch %q; while :; do sleep 0.02; done`, started)
	wait, _ := startCLI("run", "--url", url, "--key", "k", "--grace", "200ms", "--", "sh", "-c", script)
	waitFile(t, started)
	store.ForceExpire("k")
	r := wait()
	if r.code != exitLeaseLost || !strings.Contains(r.stderr, "SIGKILL") {
		t.Errorf("code %d (want %d), stderr:\n%s", r.code, exitLeaseLost, r.stderr)
	}
}

// TestRunBinaryExitStatus runs the real binary: exit codes and signals of
// the command pass through.
func TestRunBinaryExitStatus(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		code int
	}{
		{[]string{"sh", "-c", "exit 0"}, 0},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "exit 255"}, 255},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"/nonexistent/command"}, exitNotFound},
		{[]string{"/"}, exitCannotExec},
	} {
		cmd := exec.Command(binPath, append([]string{"run", "-q", "--url", "mem://", "--key", "k", "--"}, tc.argv...)...)
		out, _ := cmd.CombinedOutput()
		if got := cmd.ProcessState.ExitCode(); got != tc.code {
			t.Errorf("%q: exit %d, want %d\n%s", tc.argv, got, tc.code, out)
		}
	}
}

// TestRunBinaryForwardsSignal: SIGTERM to distlock reaches the command.
func TestRunBinaryForwardsSignal(t *testing.T) {
	started := filepath.Join(t.TempDir(), "started")
	script := fmt.Sprintf(`trap 'exit 42' TERM; touch %q; while :; do sleep 0.02; done`, started)
	cmd := exec.Command(binPath, "run", "-q", "--url", "mem://", "--key", "k", "--", "sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, started)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("distlock did not exit after SIGTERM")
	}
	if got := cmd.ProcessState.ExitCode(); got != 42 {
		t.Errorf("exit %d, want the command's 42 from its SIGTERM trap", got)
	}
}

// TestRunBinaryRedisProcesses: two distlock processes on one Redis key; the
// second waits until the first command exits. Skipped until redis:// is
// registered.
func TestRunBinaryRedisProcesses(t *testing.T) {
	if !registered("redis") {
		t.Skip("redis:// is not registered in this build")
	}
	s := testserver.Redis(t)
	url := "redis://" + s.Addr() + "/0"
	dir := t.TempDir()
	started, proceed := filepath.Join(dir, "started"), filepath.Join(dir, "proceed")
	script := fmt.Sprintf(`touch %q; while [ ! -e %q ]; do sleep 0.02; done; echo "$DISTLOCK_TOKEN"`, started, proceed)
	first := exec.Command(binPath, "run", "-q", "--url", url, "--key", "k", "--", "sh", "-c", script)
	var out1, out2 testutil.SyncBuffer
	first.Stdout, first.Stderr = &out1, &out1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	waitFile(t, started)
	second := exec.Command(binPath, "run", "-q", "--url", url, "--key", "k", "--", "sh", "-c", `echo "$DISTLOCK_TOKEN"`)
	second.Stdout, second.Stderr = &out2, &out2
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer second.Process.Kill()
	done2 := make(chan error, 1)
	go func() { done2 <- second.Wait() }()
	select {
	case err := <-done2:
		t.Fatalf("second run finished while the first held the lock (%v): %s", err, out2.String())
	case <-time.After(300 * time.Millisecond):
	}
	if err := os.WriteFile(proceed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first: %v\n%s", err, out1.String())
	}
	select {
	case err := <-done2:
		if err != nil {
			t.Fatalf("second: %v\n%s", err, out2.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("second run did not finish after the first released")
	}
	t1, _ := strconv.Atoi(strings.TrimSpace(out1.String()))
	t2, _ := strconv.Atoi(strings.TrimSpace(out2.String()))
	if t1 <= 0 || t2 <= t1 {
		t.Errorf("tokens %q then %q: want positive and increasing", out1.String(), out2.String())
	}
}

// TestRunBinarySignalWhileWaiting: a signal that ends the wait for a held
// lock is the reason given, and the exit status is 128+N; the command
// never runs.
func TestRunBinarySignalWhileWaiting(t *testing.T) {
	if !registered("redis") {
		t.Skip("redis:// is not registered in this build")
	}
	s := testserver.Redis(t)
	url := "redis://" + s.Addr() + "/0"
	l, err := distlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.TryAcquire(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	ran := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command(binPath, "run", "-q", "--url", url, "--key", "busy", "--", "touch", ran)
	var stderr testutil.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	time.Sleep(500 * time.Millisecond) // distlock is waiting for the lock by now
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != 128+15 {
		t.Errorf("exit %d, want %d", got, 128+15)
	}
	if want := "distlock run: \"busy\" not acquired: stopped by a signal (terminated)\n"; stderr.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr.String(), want)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the command ran without the lock")
	}
}

// TestRunBinarySIGKILLTakesCommand: SIGKILL to a `distlock run` holding a
// Redis lock must take its command with it; a command reparented to init
// would keep running while the lock is free for the next holder. Linux
// only: elsewhere nothing can tie the command to a SIGKILLed parent.
func TestRunBinarySIGKILLTakesCommand(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signals are Linux-only")
	}
	if !registered("redis") {
		t.Skip("redis:// is not registered in this build")
	}
	s := testserver.Redis(t)
	url := "redis://" + s.Addr() + "/0"
	for _, fg := range []bool{false, true} {
		t.Run(fmt.Sprintf("foreground=%v", fg), func(t *testing.T) {
			args := []string{"run", "-q", "--url", url, "--key", "sigkill-" + strconv.FormatBool(fg)}
			if fg {
				args = append(args, "--foreground")
			}
			cmd := exec.Command(binPath, append(args, "--", "sleep", "30")...)
			// A file, not a pipe: cmd.Wait would wait for a surviving
			// command to close its end.
			out, err := os.Create(filepath.Join(t.TempDir(), "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			// The command exists only once distlock holds the lock.
			child := waitChild(t, cmd.Process.Pid, "sleep")
			defer child.kill()

			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			deadline := time.Now().Add(2 * time.Second)
			for child.alive() {
				if time.Now().After(deadline) {
					b, _ := os.ReadFile(out.Name())
					t.Fatalf("command (pid %d) still running 2s after distlock was SIGKILLed; distlock's output:\n%s", child.pid, b)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestRunBinaryKillsLeftoverGroup: what the command leaves running in its
// process group is killed before distlock releases the lock, so no
// background child outlives the lock.
func TestRunBinaryKillsLeftoverGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the test finds processes through /proc")
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	for _, tc := range []struct {
		name, script string
		code         int
		expire       bool
	}{
		{"exit", fmt.Sprintf(`sleep 30 >/dev/null 2>&1 & echo $! > %q; exit 3`, pidFile), 3, false},
		{"lease-lost", fmt.Sprintf(`trap 'exit 0' TERM; (trap '' TERM; exec sleep 30) >/dev/null 2>&1 & echo $! > %q; while :; do sleep 0.02; done`, pidFile), exitLeaseLost, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(pidFile)
			url, store := memURL(t) // in-process: mem:// is fine
			wait, _ := startCLI("run", "-q", "--url", url, "--key", "k", "--grace", "5s", "--", "sh", "-c", tc.script)
			waitFile(t, pidFile)
			time.Sleep(20 * time.Millisecond) // the pid is written in full
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file %q: %v", b, err)
			}
			bg := procOf(pid)
			defer bg.kill()
			if tc.expire && !store.ForceExpire("k") {
				t.Fatal("key not held while the command runs")
			}
			r := wait()
			if r.code != tc.code {
				t.Errorf("code %d, want %d\n%s", r.code, tc.code, r.stderr)
			}
			deadline := time.Now().Add(2 * time.Second)
			for bg.alive() {
				if time.Now().After(deadline) {
					t.Fatalf("background child (pid %d) still running after distlock returned", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// proc is a process identified by pid and start time, so that a recycled
// pid is not mistaken for it.
type proc struct {
	pid   int
	start string
}

// procStat returns /proc/pid/stat's state, ppid, comm and start time.
func procStat(pid int) (state byte, ppid int, comm, start string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, "", "", false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return 0, 0, "", "", false
	}
	f := strings.Fields(s[closing+1:]) // state ppid pgrp ... starttime is f[19]
	if len(f) < 20 {
		return 0, 0, "", "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, s[open+1 : closing], f[19], true
}

func procOf(pid int) proc {
	_, _, _, start, _ := procStat(pid)
	return proc{pid, start}
}

// alive: the process exists and is not a zombie (PID 1 in a container may
// never reap it).
func (p proc) alive() bool {
	if syscall.Kill(p.pid, 0) != nil {
		return false
	}
	state, _, _, start, ok := procStat(p.pid)
	return ok && state != 'Z' && start == p.start
}

// kill cleans up after a failed test.
func (p proc) kill() {
	if p.alive() {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// waitChild waits (bounded) for parent's child named comm.
func waitChild(t *testing.T, parent int, comm string) proc {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if state, ppid, c, start, ok := procStat(pid); ok && ppid == parent && c == comm && state != 'Z' {
				return proc{pid, start}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no child %q of pid %d appeared", comm, parent)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// run passes the fence epoch with the token and holder: a command that
// guards its writes after a move to a new deployment (fence_epoch=N) must
// present N, or it is refused there.
func TestRunPassesFenceEpoch(t *testing.T) {
	url, _ := memURL(t)
	r := runCLI(t, "run", "--url", url+"?fence_epoch=3", "--key", "job", "--", "sh", "-c", `echo "$DISTLOCK_FENCE_EPOCH"`)
	if r.code != 0 {
		t.Fatalf("code %d, stderr:\n%s", r.code, r.stderr)
	}
	if got := strings.TrimSpace(r.stdout); got != "3" {
		t.Fatalf("DISTLOCK_FENCE_EPOCH = %q, want 3", got)
	}
}

// The command gets the backend's address, never the password to reach it:
// DISTLOCK_URL loses its user:password@ and password parameters.
func TestRunKeepsCredentialsFromTheCommand(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://alice:s3cret@127.0.0.1:6379/2?prefix=app%3A": "redis://127.0.0.1:6379/2?prefix=app%3A",
		"redis://:s3cret@127.0.0.1:6379":                      "redis://127.0.0.1:6379",
		"etcd://h:2379/?password=s3cret&prefix=p":             "etcd://h:2379/?prefix=p",
		"zk://u:s3cret@h:2181/base":                           "zk://h:2181/base",
		"mem://name":                                          "mem://name",
	} {
		if got := withoutCredentials(raw); got != want {
			t.Errorf("withoutCredentials(%q) = %q, want %q", raw, got, want)
		}
	}
	url, _ := memURL(t)
	r := runCLI(t, "run", "--url", strings.Replace(url, "mem://", "mem://user:s3cret@", 1), "--key", "job", "--", "sh", "-c", `env`)
	if r.code != 0 || !strings.Contains(r.stdout, "DISTLOCK_URL=mem://") {
		t.Fatalf("code %d; the command's environment:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "s3cret") {
		t.Fatalf("the command's environment holds the password:\n%s", r.stdout)
	}
}

// closedAddr is a loopback address nothing listens on: a backend there is
// unreachable, and fails fast (connection refused).
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRunNonblock: -n, --nonblock and --wait 0 make one attempt, as
// flock -n: a held key exits 75 at once, a free one runs the command.
func TestRunNonblock(t *testing.T) {
	url, _ := memURL(t)
	l, err := distlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.TryAcquire(context.Background(), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	for _, tc := range []struct {
		mode []string
		key  string
		code int
	}{
		{[]string{"-n"}, "held", exitNotAcquired},
		{[]string{"--nonblock"}, "held", exitNotAcquired},
		{[]string{"--wait", "0"}, "held", exitNotAcquired},
		{[]string{"--wait=0s"}, "held", exitNotAcquired},
		{[]string{"-n"}, "free", exitOK},
		{[]string{"--wait", "0"}, "free", exitOK},
		{[]string{"--wait", "1s"}, "free", exitOK},
	} {
		args := append(append([]string{"run", "-q", "--url", url, "--key", tc.key}, tc.mode...), "--", "sh", "-c", "echo ran")
		began := time.Now()
		r := runCLI(t, args...)
		took := time.Since(began)
		ran := strings.Contains(r.stdout, "ran")
		if r.code != tc.code || ran != (tc.code == exitOK) {
			t.Errorf("%q on the %s key: code %d, ran %v; want %d\n%s", tc.mode, tc.key, r.code, ran, tc.code, r.stderr)
		}
		if took > 2*time.Second {
			t.Errorf("%q on the %s key took %v: it waited", tc.mode, tc.key, took)
		}
	}
}

// TestRunLooksUpCommandFirst: a command that cannot run is reported (127
// missing, 126 not executable) before the backend is contacted: the URL
// points at a closed port, which would exit 69.
func TestRunLooksUpCommandFirst(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "notexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inPath := filepath.Join(dir, "job-in-path")
	if err := os.WriteFile(inPath, []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	closed := "redis://" + closedAddr(t)
	for _, tc := range []struct {
		name, command string
		code          int
	}{
		{"missing in PATH", "distlock-no-such-command", exitNotFound},
		{"missing path", filepath.Join(dir, "missing"), exitNotFound},
		{"not executable", notExec, exitCannotExec},
		{"a directory", dir, exitCannotExec},
		{"found: the backend is next", "job-in-path", exitUnavailable},
	} {
		r := runCLI(t, "run", "-q", "--url", closed, "--key", "k", "--", tc.command)
		if r.code != tc.code {
			t.Errorf("%s (%s): code %d, want %d\n%s", tc.name, tc.command, r.code, tc.code, r.stderr)
		}
	}
	url, _ := memURL(t)
	if r := runCLI(t, "run", "-q", "--url", url, "--key", "k", "--", "job-in-path"); r.code != 0 || r.stdout != "ran\n" {
		t.Errorf("a command found in PATH: code %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
}
