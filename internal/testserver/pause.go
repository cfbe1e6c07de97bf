package testserver

import (
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Pause stops the server and its child processes with SIGSTOP. It returns
// once they are stopped, so a request sent afterwards gets no answer until
// Resume. Connections stay open: clients see timeouts, not errors.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return ErrNotRunning
	}
	if s.paused {
		return nil
	}
	pids, err := freeze(s.run.proc.Pid)
	if err == nil {
		s.watchdog, err = startWatchdog(pids)
	}
	if err != nil {
		signalFamily(s.run.proc.Pid, syscall.SIGCONT)
		return fmt.Errorf("testserver: pause %s: %w", s.kind, err)
	}
	s.paused = true
	return nil
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return ErrNotRunning
	}
	signalFamily(s.run.proc.Pid, syscall.SIGCONT)
	s.setPausedLocked(false)
	return nil
}

func (s *Server) setPausedLocked(paused bool) {
	s.paused = paused
	if !paused && s.watchdog != nil {
		s.watchdog.release()
		s.watchdog = nil
	}
}

// watchdog resumes and kills a paused server's processes if the test binary
// dies. Pdeathsig kills only the server's main process; its children usually
// exit when it does, but not while they are stopped, and PostgreSQL's
// backends are not even in its process group.
type watchdog struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startWatchdog starts a shell that reads a line from a pipe held by the
// test binary. It reads "ok" when the pause ends normally; EOF means that the
// test binary is gone, and the shell kills pids.
func startWatchdog(pids []int) (*watchdog, error) {
	args := []string{"-c", `read -r x; [ "$x" = ok ] && exit 0; kill -KILL "$@"; kill -CONT "$@"`, "watchdog"}
	for _, pid := range pids {
		args = append(args, strconv.Itoa(pid))
	}
	cmd := exec.Command("/bin/sh", args...)
	// Its own process group, so that a Ctrl-C meant for the tests does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	return &watchdog{cmd, stdin}, nil
}

// release tells the watchdog to exit without action and reaps it.
func (w *watchdog) release() {
	_, _ = io.WriteString(w.stdin, "ok\n")
	w.stdin.Close()
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = w.cmd.Process.Kill()
	}
}

// signalFamily sends sig to root's process group and to all processes of its
// family (see family), and returns the latter.
func signalFamily(root int, sig syscall.Signal) []int {
	_ = syscall.Kill(-root, sig)
	pids := family(root)
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	return pids
}

// freeze stops root and its family with SIGSTOP and waits until all of them
// are stopped, since signals are delivered asynchronously. It repeats until
// no new process shows up, in case one was forked in the meantime. It returns
// every process it stopped.
func freeze(root int) ([]int, error) {
	deadline := time.Now().Add(time.Second)
	seen := map[int]bool{}
	for {
		settled := true
		for _, pid := range signalFamily(root, syscall.SIGSTOP) {
			if !seen[pid] || !stopped(pid) {
				settled = false
			}
			seen[pid] = true
		}
		pids := make([]int, 0, len(seen))
		for pid := range seen {
			pids = append(pids, pid)
		}
		if settled {
			return pids, nil
		}
		if time.Now().After(deadline) {
			return pids, fmt.Errorf("testserver: processes of %d not stopped after 1s", root)
		}
		time.Sleep(time.Millisecond)
	}
}
