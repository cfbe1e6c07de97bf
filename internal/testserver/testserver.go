package testserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotRunning is returned by Pause and Resume when the server process is not running.
var ErrNotRunning = errors.New("testserver: server is not running")

const (
	stopGrace   = 5 * time.Second  // how long Stop waits before SIGKILL
	reapTimeout = 10 * time.Second // how long Kill waits for the processes to be gone
	logTail     = 40               // log lines quoted in failure messages
)

// Server is one server process. Its methods are safe for concurrent use.
type Server struct {
	kind    string // "redis", "etcd", "zookeeper" or "postgres"
	dir     string
	port    int
	ports   []int // ports[0] == port; then peer/election ports for cluster members
	logPath string
	timeout time.Duration // readiness bound for a start
	ownDir  bool          // dir was made by Start/StartCluster: Close removes it

	// Filled in by the kind's setup before the first start.
	bin     string
	args    []string
	env     []string            // nil: inherit the test's environment
	cred    *syscall.Credential // non-nil: run as another OS user (postgres as root)
	stopSig syscall.Signal      // graceful stop signal
	ready   func(ctx context.Context) error
	web     *http.Client // etcd over TLS: reaches its HTTP endpoints; nil: plain HTTP
	dsn     string

	mu       sync.Mutex
	run      *run // nil when not running
	paused   bool
	watchdog *watchdog // while paused
}

// run is one execution of a server process.
type run struct {
	proc *os.Process
	done chan struct{} // closed once proc has been reaped
	err  error         // exit status; read only after done is closed
}

// Addr returns the client address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// Port returns the client port.
func (s *Server) Port() int { return s.port }

// Dir returns the directory holding the server's data, configuration and log.
func (s *Server) Dir() string { return s.dir }

// DSN returns a pgx/libpq connection URL for a Postgres server, and "" for other kinds.
func (s *Server) DSN() string { return s.dsn }

// PID returns the process id of the running server, or 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return 0
	}
	return s.run.proc.Pid
}

// Log returns the contents of the server's log file (all runs, including restarts).
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", s.logPath, err)
	}
	return string(b)
}

func (s *Server) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last lines of %s ---\n%s", s.logPath, strings.Join(lines, "\n"))
}

// Kill sends SIGKILL to the server and its child processes and reaps it. It
// is idempotent and works on a paused server.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

// Stop shuts the server down gracefully (SIGTERM; SIGINT, a fast shutdown, for
// PostgreSQL) and kills it if it has not exited after a few seconds.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

// Restart starts the server again with the same ports and data directory and
// waits until it is ready. A running server is stopped gracefully first. A
// cluster member only becomes ready when its cluster has a quorum; use
// Cluster.Restart to bring back several members at once.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	err := s.stopLocked()
	if err == nil {
		err = s.startLocked()
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.waitReady(ctx); err != nil {
		_ = s.Kill()
		return err
	}
	return nil
}

func (s *Server) runningLocked() bool {
	if s.run == nil {
		return false
	}
	select {
	case <-s.run.done:
		return false
	default:
		return true
	}
}

// live reports whether s is running and not paused, so that a request to
// it gets an answer.
func (s *Server) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked() && !s.paused
}

func (s *Server) startLocked() error {
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "=== testserver %s: %s %s\n", time.Now().Format(time.RFC3339Nano), s.bin, strings.Join(s.args, " "))

	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Env = s.env
	// Files, not pipes: Wait must not depend on grandchildren closing a pipe.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr(s.cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testserver: start %s: %w", s.kind, err)
	}
	r := &run{proc: cmd.Process, done: make(chan struct{})}
	s.run, s.paused = r, false
	go func() {
		r.err = cmd.Wait() // published to readers by close(done)
		close(r.done)
	}()
	return nil
}

func (s *Server) killLocked() error {
	if s.run == nil {
		return nil
	}
	root := s.run.proc.Pid
	// Freeze the family first: once the root is dead its children are
	// reparented and cannot be found. SIGKILL before SIGCONT: SIGKILL also
	// ends stopped processes, whereas a SIGCONT first could let a paused
	// server answer a request the test expects to be lost.
	pids, _ := freeze(root)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGCONT} {
		_ = syscall.Kill(-root, sig)
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	// Wait until the root is reaped and all of the family is gone, so that
	// a restart finds port and shared memory free.
	deadline := time.NewTimer(reapTimeout)
	defer deadline.Stop()
	select {
	case <-s.run.done:
	case <-deadline.C:
		return fmt.Errorf("testserver: %s (pid %d) not reaped after %v", s.kind, root, reapTimeout)
	}
	s.run = nil
	s.setPausedLocked(false)
	for _, pid := range pids {
		for alive(pid) {
			select {
			case <-deadline.C:
				return fmt.Errorf("testserver: %s process %d still alive after %v", s.kind, pid, reapTimeout)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

func (s *Server) stopLocked() error {
	if !s.runningLocked() {
		return s.killLocked() // reaps a crashed server and its leftovers
	}
	if s.paused {
		signalFamily(s.run.proc.Pid, syscall.SIGCONT)
	}
	_ = s.run.proc.Signal(s.stopSig) // the root only: it shuts its children down itself
	select {
	case <-s.run.done:
	case <-time.After(stopGrace):
	}
	return s.killLocked()
}

// waitReady polls the server's readiness check until it passes, the process
// exits, or the start timeout (or ctx) expires.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	if r == nil {
		return ErrNotRunning
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.ready(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-r.done:
			return fmt.Errorf("testserver: %s on port %d exited before it was ready (%v)\n%s", s.kind, s.port, r.err, s.logTail(logTail))
		case <-ctx.Done():
			return fmt.Errorf("testserver: %s on port %d not ready: %v (last check: %v)\n%s", s.kind, s.port, ctx.Err(), err, s.logTail(logTail))
		case <-tick.C:
		}
	}
}
