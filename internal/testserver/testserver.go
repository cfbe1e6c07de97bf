// Package testserver starts real redis-server, etcd, ZooKeeper and PostgreSQL
// processes for tests and injects process faults into them.
//
// Every server runs as a child process of the test binary on free loopback
// ports, with its data, configuration and log in a directory from t.TempDir.
// The constructors block until the server answers real requests and register
// a t.Cleanup that kills and reaps it. A test whose server binary is missing
// is skipped, or fails when the environment variable CI is "true".
//
// Fault injection reaches a server's child processes too (PostgreSQL
// backends, Redis rewrite children), so a paused server answers nothing and a
// killed one leaves nothing behind. Servers die with the test binary, even
// when paused. Linux is the supported platform; elsewhere on Unix only the
// process group is reached.
//
// Start and StartCluster start the same servers for a program rather than a
// test (distlock bench uses them); the program closes them.
package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
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

// Cluster is a group of servers that form one etcd cluster or ZooKeeper ensemble.
type Cluster struct {
	// Members are the cluster's servers; member i is "m<i>" (etcd) or myid i+1 (ZooKeeper).
	Members []*Server
}

// Endpoints returns the client addresses of all members.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.Addr()
	}
	return eps
}

// ConnectString returns the client addresses joined by commas, a ZooKeeper
// connect string. (go-zookeeper's zk.Connect takes Endpoints instead.)
func (c *Cluster) ConnectString() string { return strings.Join(c.Endpoints(), ",") }

// Leader returns the index of the member that is currently the leader. It
// fails if no reachable member is the leader.
func (c *Cluster) Leader() (int, error) {
	for i, m := range c.Members {
		var ok bool
		var err error
		switch m.kind {
		case "etcd":
			ok, err = etcdIsLeader(m)
		case "zookeeper":
			var mode string
			mode, err = zkMode(m)
			ok = mode == "leader"
		default:
			return -1, fmt.Errorf("testserver: %s has no leader", m.kind)
		}
		if err == nil && ok {
			return i, nil
		}
	}
	return -1, errors.New("testserver: no member is the leader")
}

// Mode returns the ZooKeeper mode of member i as reported by the srvr
// command: "leader", "follower" or "standalone".
func (c *Cluster) Mode(i int) (string, error) { return zkMode(c.Members[i]) }

// Restart starts every member that is not running, concurrently, and waits
// until all of them are ready. Use it after killing a quorum of members.
func (c *Cluster) Restart(ctx context.Context) error {
	var started []*Server
	for _, m := range c.Members {
		m.mu.Lock()
		var err error
		if !m.runningLocked() {
			if err = m.killLocked(); err == nil { // reap a crashed member
				err = m.startLocked()
			}
			if err == nil {
				started = append(started, m)
			}
		}
		m.mu.Unlock()
		if err != nil {
			return err
		}
	}
	for _, m := range started {
		if err := m.waitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// config holds the settings that Options change.
type config struct {
	startTimeout     time.Duration
	redisAppendFsync string // "" = no persistence at all
	etcdHeartbeat    time.Duration
	etcdElection     time.Duration
	zkTick           time.Duration
	zkMaxSession     time.Duration // 0: 60 s
	pgFsync          bool
}

// Option changes how a server is configured.
type Option func(*config)

func newConfig(opts []Option) *config {
	c := &config{
		etcdHeartbeat: 50 * time.Millisecond,
		etcdElection:  500 * time.Millisecond,
		zkTick:        100 * time.Millisecond,
		pgFsync:       true,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithStartTimeout bounds how long a start waits for the server to become
// ready (default 15 s; 30 s for ZooKeeper).
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.startTimeout = d } }

// WithRedisAppendFsync turns on Redis's append-only file with the given
// appendfsync policy: "always", "everysec" or "no". Without it Redis persists
// nothing, so a restart starts empty.
func WithRedisAppendFsync(policy string) Option {
	return func(c *config) { c.redisAppendFsync = policy }
}

// WithEtcdTiming sets etcd's raft heartbeat interval and election timeout
// (default 50 ms and 500 ms, so elections after a fault are fast).
func WithEtcdTiming(heartbeat, election time.Duration) Option {
	return func(c *config) { c.etcdHeartbeat, c.etcdElection = heartbeat, election }
}

// WithZKTickTime sets ZooKeeper's tickTime (default 100 ms). The server
// accepts session timeouts from 2 ticks up to 60 s.
func WithZKTickTime(d time.Duration) Option { return func(c *config) { c.zkTick = d } }

// WithZKMaxSessionTimeout sets ZooKeeper's maxSessionTimeout (default 60 s):
// the server grants no client a longer session timeout than this.
func WithZKMaxSessionTimeout(d time.Duration) Option { return func(c *config) { c.zkMaxSession = d } }

// WithPostgresFsync turns PostgreSQL's fsync setting on (the default) or off.
func WithPostgresFsync(on bool) Option { return func(c *config) { c.pgFsync = on } }

// spec describes how to start one kind of server.
type spec struct {
	kind    string
	nports  int // ports per member; the first is the client port
	timeout time.Duration
	// setup fills in bin, args and ready of every member and writes their
	// configuration. It runs once per start attempt, with fresh ports and dirs.
	setup func(ms []*Server) error
}

// startGroup starts n servers of one kind that are configured together and
// waits until all are ready, in directories from t.TempDir and with a
// t.Cleanup that kills each. It fails the test if they cannot be started.
func startGroup(t testing.TB, cfg *config, n int, sp spec) []*Server {
	t.Helper()
	ms, err := startGroupCtx(context.Background(), cfg, n, sp, groupHooks{
		dir: func() (string, error) { return t.TempDir(), nil },
		created: func(s *Server) {
			t.Cleanup(func() {
				if err := s.Kill(); err != nil {
					t.Errorf("%v", err)
				}
			})
		},
		logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("%v", err)
	}
	return ms
}

// groupHooks adapt startGroupCtx to its caller: a test (t.TempDir,
// t.Cleanup) or a program (Start, StartCluster).
type groupHooks struct {
	dir     func() (string, error) // a new empty directory for one member
	created func(*Server)          // called for each member before it starts
	logf    func(format string, args ...any)
}

// startGroupCtx starts n servers of one kind that are configured together
// and waits until all are ready. If a port was taken meanwhile it retries
// with fresh ports and directories. On failure it kills what it started.
func startGroupCtx(ctx context.Context, cfg *config, n int, sp spec, h groupHooks) ([]*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserver: need at least one %s server, got %d", sp.kind, n)
	}
	timeout := sp.timeout
	if cfg.startTimeout > 0 {
		timeout = cfg.startTimeout
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		begin := time.Now()
		ports, perr := freePorts(n * sp.nports)
		if perr != nil {
			return nil, perr
		}
		ms := make([]*Server, n)
		for i := range ms {
			dir, derr := h.dir()
			if derr != nil {
				return nil, fmt.Errorf("testserver: %w", derr)
			}
			s := &Server{
				kind:    sp.kind,
				dir:     dir,
				ports:   ports[i*sp.nports : (i+1)*sp.nports],
				logPath: filepath.Join(dir, sp.kind+".log"),
				timeout: timeout,
				stopSig: syscall.SIGTERM,
			}
			s.port = s.ports[0]
			h.created(s)
			ms[i] = s
		}
		if err = sp.setup(ms); err != nil {
			return nil, fmt.Errorf("testserver: set up %s: %w", sp.kind, err)
		}
		if err = startAll(ctx, ms); err == nil {
			h.logf("testserver: %d %s server(s) ready in %v at %s", n, sp.kind, time.Since(begin).Round(time.Millisecond), (&Cluster{ms}).ConnectString())
			return ms, nil
		}
		clash := false
		for _, s := range ms {
			_ = s.Kill()
			clash = clash || bytes.Contains(bytes.ToLower([]byte(s.Log())), []byte("address already in use"))
		}
		if !clash || ctx.Err() != nil {
			break
		}
		h.logf("testserver: a %s port was taken, retrying with new ports", sp.kind)
	}
	return nil, err
}

func startAll(ctx context.Context, ms []*Server) error {
	for _, s := range ms {
		s.mu.Lock()
		err := s.startLocked()
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	for _, s := range ms {
		if err := s.waitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

var (
	portsMu     sync.Mutex
	portsIssued = map[int]bool{} // never hand out a port twice in one process
)

// freePorts returns n distinct free loopback ports. The listeners stay open
// until all n are chosen so that the kernel does not return one twice.
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(ports) < n {
		if len(held) > n+100 {
			return nil, fmt.Errorf("testserver: cannot find %d free ports", n)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testserver: find a free port: %w", err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if !portsIssued[p] {
			portsIssued[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

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
