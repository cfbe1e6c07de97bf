package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/distlock"
)

const runHelp = `
Usage: distlock run --url URL --key KEY [flags] -- COMMAND [ARG...]

Acquires the lock on --key, runs COMMAND with the
lock's fencing token in its environment, keeps the lease renewed while it
runs, and releases the lock when it exits. If the lease is lost (for
instance the backend expired it), COMMAND gets SIGTERM, then SIGKILL after
--grace, and distlock exits with status 70.

Waiting, as flock(1): by default run waits for the lock as long as it
takes; --wait D waits up to D; -n (--nonblock), or --wait 0, does not
wait: if another holder has the key, run exits 75 at once (flock -n exits
1; distlock keeps sysexits' EX_TEMPFAIL), so a cron job that finds the
previous run still going skips this turn. COMMAND is looked up (PATH, or
the path given) before the backend is contacted: a missing COMMAND exits
127, one that is not executable 126, without taking the lock.

COMMAND's environment gains:
  DISTLOCK_TOKEN   the fencing token (pass it to what the lock protects)
  DISTLOCK_HOLDER  the lease's holder id: pass it with the token (a fence
                   accepts an equal token only from the holder that wrote it)
  DISTLOCK_FENCE_EPOCH  the fence epoch (the URL's fence_epoch, default 0):
                   pass it too; a fence compares it before the token
  DISTLOCK_KEY     the key
  DISTLOCK_URL     the backend URL without its credentials (user:password@,
                   password parameters): the command does not get the secret

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to distlock are
forwarded to COMMAND. COMMAND runs in its own process group (so that a lost
lease stops its children too) unless --foreground is given; whatever is
left of that group when COMMAND exits is killed (SIGKILL) before the lock
is released, so nothing COMMAND started keeps running outside the lock.

If distlock itself dies while COMMAND runs (even by SIGKILL), on Linux the
kernel kills COMMAND (a parent-death signal, SIGKILL); COMMAND's own
children survive that unless they arrange the same. Elsewhere distlock
sets no such signal, so a distlock killed by SIGKILL leaves COMMAND running
after its lease expires: stop distlock with a signal it forwards instead.

Exit status: COMMAND's (128+N if killed by signal N); 64 usage error;
69 backend unreachable or failing; 70 lease lost; 75 not acquired (held,
with -n or --wait 0; or --wait ran out); 77 credentials or a permission
refused; 126 COMMAND not executable; 127 COMMAND not found.

The backend is --url, else $DISTLOCK_URL; with neither, run stops with a
usage error. mem:// locks only within one distlock process, so it excludes
nothing between two runs: it is used only when asked for (--url mem://).
Settings in the URL (redis://host:6379?ttl=30s) hold unless the flag for
the same setting is given on the command line: --ttl overrides ttl=.
`

// runConfig is `distlock run`'s flags.
type runConfig struct {
	url, key          string
	ttl, wait, grace  time.Duration
	foreground, quiet bool
	nonblock          bool // one attempt: -n, or --wait 0
	// ttlOpts is WithTTL(ttl), or nothing when the URL sets the TTL and
	// --ttl was not given (see leaseTTL).
	ttlOpts []distlock.CallOption
}

// defaultRunTTL is run's lease TTL when neither --ttl nor the URL sets one.
const defaultRunTTL = 15 * time.Second

func cmdRun(ctx context.Context, args []string, s stdio) int {
	var c runConfig
	fs := newFlags("run", runHelp, s)
	fs.StringVar(&c.url, "url", "", "backend `URL`, e.g. redis://127.0.0.1:6379 (default $DISTLOCK_URL; one of the two is required)")
	fs.StringVar(&c.key, "key", "", "lock key (required)")
	fs.DurationVar(&c.ttl, "ttl", defaultRunTTL, "lease TTL, renewed every TTL/3 while COMMAND runs; the URL's ttl= replaces the default, this flag replaces both")
	fs.BoolVarP(&c.nonblock, "nonblock", "n", false, "do not wait: exit 75 at once if the key is held (like flock -n)")
	fs.DurationVar(&c.wait, "wait", 0, "wait up to this long for the lock, then exit 75; 0 does not wait (as -n); not given: wait as long as it takes")
	fs.DurationVar(&c.grace, "grace", 10*time.Second, "after a lost lease, time between SIGTERM and SIGKILL")
	fs.BoolVar(&c.foreground, "foreground", false, "run COMMAND in distlock's process group (it may read the terminal; only COMMAND itself is signalled)")
	fs.BoolVarP(&c.quiet, "quiet", "q", false, "print nothing but errors")
	if code, ok := parseFlags(fs, args, s); !ok {
		return code
	}
	if !fs.Changed("url") {
		c.url = os.Getenv("DISTLOCK_URL")
	}
	if code := checkRunConfig(&c, fs, s); code != 0 {
		return code
	}
	// Before the backend: a typo in COMMAND should not cost a lock (nor
	// look like an unreachable backend).
	if code := lookCommand(fs.Args()[0], s); code != 0 {
		return code
	}
	c.ttlOpts = leaseTTL(c.url, c.ttl, fs.Changed("ttl"))
	return runLocked(ctx, c, fs.Args(), s)
}

// checkRunConfig checks run's flags and settles the wait mode; it returns
// exitUsage after printing the error, or 0.
func checkRunConfig(c *runConfig, fs *flagSet, s stdio) int {
	if fs.Changed("wait") && c.wait == 0 {
		c.nonblock = true // flock -w 0: do not wait
	}
	argv := fs.Args()
	switch {
	case c.nonblock && c.wait > 0:
		return usageError(s, "run", "-n (do not wait) and --wait %v contradict each other", c.wait)
	case c.key == "":
		return usageError(s, "run", "--key is required")
	case len(argv) == 0:
		return usageError(s, "run", "no command given (distlock run --key K -- COMMAND ARGS...)")
	case c.ttl <= 0 || c.ttl > distlock.MaxTTL:
		return usageError(s, "run", "--ttl %v out of range (0, %v]", c.ttl, distlock.MaxTTL)
	case c.wait < 0:
		return usageError(s, "run", "--wait %v is negative", c.wait)
	case c.grace < 0:
		return usageError(s, "run", "--grace %v is negative", c.grace)
	case c.url == "" && fs.Changed("url"):
		return usageError(s, "run", "--url is empty")
	case c.url == "":
		// mem:// would run the command while excluding no other run.
		return usageError(s, "run", "no backend URL: pass --url or set DISTLOCK_URL, e.g. --url redis://127.0.0.1:6379 (--url mem:// locks only within this one process)")
	}
	return 0
}

// lookCommand finds name as exec would (PATH, or the file when name has a
// slash) and returns 0, or the exit code after printing why it cannot run:
// exitNotFound when there is no such command, exitCannotExec otherwise (not
// executable, a directory).
func lookCommand(name string, s stdio) int {
	_, err := exec.LookPath(name)
	if err == nil {
		return 0
	}
	fmt.Fprintf(s.err, "distlock run: %s\n", err)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotExec
}

// leaseTTL is the Acquire option for a TTL flag: a flag given on the
// command line overrides the URL's ttl=, and the URL's overrides the flag's
// default (Open applies the URL's, Acquire's options override Open's).
func leaseTTL(rawURL string, ttl time.Duration, explicit bool) []distlock.CallOption {
	if !explicit {
		if u, err := url.Parse(rawURL); err == nil && u.Query().Has("ttl") {
			return nil
		}
	}
	return []distlock.CallOption{distlock.WithTTL(ttl)}
}

// forwarded are the signals distlock passes on to its command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func runLocked(ctx context.Context, c runConfig, argv []string, s stdio) int {
	logf := func(format string, args ...any) {
		if !c.quiet {
			fmt.Fprintf(s.err, "distlock run: "+format+"\n", args...)
		}
	}
	// Signals arriving while we wait for the lock end the wait; later ones
	// go to the command.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	l, err := openLocker(ctx, c.url)
	if err != nil {
		fmt.Fprintf(s.err, "distlock run: %s\n", errText(err))
		return openFailed(err)
	}
	defer l.Close()

	lease, code := acquireForRun(ctx, l, c, sigs, s)
	if lease == nil {
		return code
	}
	logf("acquired %q (token %d, ttl %v)", c.key, lease.Token(), lease.TTL())

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.in, s.out, s.err
	cmd.Env = append(os.Environ(),
		"DISTLOCK_TOKEN="+lease.Token().String(),
		"DISTLOCK_HOLDER="+lease.Fence().Holder,
		"DISTLOCK_FENCE_EPOCH="+strconv.FormatInt(lease.Fence().Epoch, 10),
		"DISTLOCK_KEY="+c.key,
		"DISTLOCK_URL="+withoutCredentials(c.url),
	)
	// holderProcAttr (proc_linux.go) gives the command a parent-death
	// SIGKILL on Linux: if distlock dies, however it dies, so does the
	// command, rather than running on after the lease has lapsed.
	cmd.SysProcAttr = holderProcAttr()
	cmd.SysProcAttr.Setpgid = !c.foreground
	exited, err := startOnLockedThread(cmd)
	if err != nil {
		fmt.Fprintf(s.err, "distlock run: %s\n", errText(err))
		releaseLease(lease, logf)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	waitErr, lost := supervise(ctx, child{cmd, c, lease, s}, exited, sigs)
	if !c.foreground {
		// Background children left in the group would otherwise run on
		// after the release. While the group has members its id cannot be
		// reused; an empty group makes this a no-op (ESRCH).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if lost {
		// Frees the key at once if only our local clock gave up on it.
		releaseLease(lease, func(string, ...any) {})
		return exitLeaseLost
	}
	releaseLease(lease, logf)
	return exitStatus(waitErr, cmd.ProcessState)
}

// child is a command running under a lease.
type child struct {
	cmd   *exec.Cmd
	c     runConfig
	lease *distlock.Lease
	s     stdio
}

// signal sends sig to the command, or to its whole group unless it runs in
// the foreground.
func (ch child) signal(sig syscall.Signal) {
	if ch.c.foreground {
		_ = ch.cmd.Process.Signal(sig)
	} else {
		_ = syscall.Kill(-ch.cmd.Process.Pid, sig) // the whole group
	}
}

// supervise waits for the command to exit, forwarding sigs to it, and
// stops it (SIGTERM, SIGKILL after the grace) when the lease is lost or
// ctx ends. It returns cmd.Wait's error and whether the lease was lost.
func supervise(ctx context.Context, ch child, exited <-chan error, sigs <-chan os.Signal) (waitErr error, lost bool) {
	leaseDone, ctxDone := ch.lease.Done(), ctx.Done()
	var kill <-chan time.Time
	terminate := func() { // SIGTERM now, SIGKILL after the grace
		ch.signal(syscall.SIGTERM)
		if kill == nil {
			kill = time.After(ch.c.grace)
		}
	}
	for {
		select {
		case waitErr = <-exited:
			return waitErr, lost
		case sig := <-sigs:
			ch.signal(sig.(syscall.Signal))
		case <-ctxDone: // only in-process callers (tests) cancel
			ctxDone = nil
			terminate()
		case <-leaseDone:
			leaseDone = nil
			if errors.Is(ch.lease.Err(), distlock.ErrReleased) {
				continue // cannot happen: only we release, after the command
			}
			lost = true
			fmt.Fprintf(ch.s.err, "distlock run: %s; sending SIGTERM to the command (SIGKILL in %v)\n", errText(ch.lease.Err()), ch.c.grace)
			terminate()
		case <-kill:
			kill = nil
			fmt.Fprintf(ch.s.err, "distlock run: the command outlived the %v grace; sending SIGKILL\n", ch.c.grace)
			ch.signal(syscall.SIGKILL)
		}
	}
}

// startOnLockedThread starts cmd and waits for it from one goroutine locked
// to its OS thread; the returned channel yields cmd.Wait's error. Linux
// sends the parent-death signal when the thread that started the child
// exits, not the process: the Go runtime ends a thread when a goroutine
// exits locked to it, so a command started from an unlocked goroutine could
// be killed by some later goroutine's exit. Holding this thread until the
// command has been reaped keeps the signal for distlock's own death.
func startOnLockedThread(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread() // the command is reaped: the thread may go back
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// acquireForRun waits for the lock; on failure it returns a nil lease and
// the exit code.
func acquireForRun(ctx context.Context, l distlock.Locker, c runConfig, sigs <-chan os.Signal, s stdio) (*distlock.Lease, int) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errWait := fmt.Errorf("--wait %v ran out", c.wait)
	if c.wait > 0 {
		var cancelT context.CancelFunc
		actx, cancelT = context.WithTimeoutCause(actx, c.wait, errWait)
		defer cancelT()
	}
	type result struct {
		lease *distlock.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		opts := append([]distlock.CallOption{distlock.WithAutoRenew(true)}, c.ttlOpts...)
		acquire := l.Acquire
		if c.nonblock {
			acquire = l.TryAcquire
		}
		ls, err := acquire(actx, c.key, opts...)
		got <- result{ls, err}
	}()
	var sig os.Signal
	var r result
	select {
	case r = <-got:
	case sig = <-sigs:
		cancel(fmt.Errorf("stopped by a signal (%v)", sig))
		r = <-got
		if r.err == nil { // won the race with the signal: give the lock back
			releaseLease(r.lease, func(string, ...any) {})
			r = result{nil, context.Cause(actx)}
		}
	}
	if r.err == nil {
		return r.lease, 0
	}
	fmt.Fprintf(s.err, "distlock run: %q not acquired: %s\n", c.key, waitError(actx, r.err))
	switch {
	case sig != nil:
		return nil, 128 + int(sig.(syscall.Signal))
	case errors.Is(context.Cause(actx), errWait) || errors.Is(r.err, context.DeadlineExceeded):
		return nil, exitNotAcquired
	case c.nonblock && errors.Is(r.err, distlock.ErrNotAcquired):
		return nil, exitNotAcquired
	default:
		return nil, exitCode(r.err, exitUnavailable)
	}
}

// openFailed is the exit code of a backend that could not be opened.
func openFailed(err error) int { return exitCode(err, exitUnavailable) }

// withoutCredentials is raw without its user:password@ and password
// parameters, for the command's environment: the command gets the backend's
// address, not the secret to reach it.
func withoutCredentials(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User = nil
	q := u.Query()
	for k := range q {
		if l := strings.ToLower(k); strings.Contains(l, "password") || strings.Contains(l, "secret") || strings.Contains(l, "token") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// waitError says why an Acquire on ctx failed: when ctx ended, its cause
// (--wait ran out, a signal) rather than the bare "context deadline
// exceeded" the error carries, with the last error of an unreachable
// backend beside it.
func waitError(ctx context.Context, err error) string {
	if ctx.Err() == nil {
		return errText(err)
	}
	why := context.Cause(ctx).Error()
	if errors.Is(err, distlock.ErrUnavailable) {
		last := err
		// The library's "(last error: ...)" is the wrapped error that is
		// ErrUnavailable without being the context's.
		if m, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range m.Unwrap() {
				if errors.Is(e, distlock.ErrUnavailable) {
					last = e
				}
			}
		}
		why += " (last error: " + errText(last) + ")"
	}
	return why
}

// releaseLease releases with a bounded context of its own: the command has
// exited, and the lock should be free for the next holder now rather than
// at its TTL.
func releaseLease(lease *distlock.Lease, logf func(string, ...any)) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), releaseTimeout, errReleaseSlow)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		logf("release: %s", waitError(ctx, err))
	}
}

const releaseTimeout = 5 * time.Second

var errReleaseSlow = fmt.Errorf("no answer within %v; the lock frees itself at its TTL", releaseTimeout)

// exitStatus maps the command's end to distlock's exit status.
func exitStatus(err error, ps *os.ProcessState) int {
	if ps == nil {
		if err != nil {
			return exitCannotExec
		}
		return exitOK
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// openLocker opens rawURL with a bounded context, so an unreachable server
// is reported rather than waited on.
func openLocker(ctx context.Context, rawURL string) (distlock.Locker, error) {
	octx, cancel := context.WithTimeoutCause(ctx, openTimeout, errOpenSlow)
	defer cancel()
	l, err := distlock.Open(octx, rawURL)
	if err != nil && errors.Is(context.Cause(octx), errOpenSlow) {
		return nil, fmt.Errorf("%w: %w", errOpenSlow, err)
	}
	return l, err
}

const openTimeout = 15 * time.Second

var errOpenSlow = fmt.Errorf("backend not reached within %v", openTimeout)

const holdHelp = `
Usage: distlock hold --url URL --key KEY [--ttl D] [--max D]

Acquires KEY, prints "HELD <token>" and keeps the lease renewed until killed
or --max passes. bench uses it as a holder it can SIGKILL (a crash that
neither releases nor renews). The URL is --url, else $DISTLOCK_URL.
`

func cmdHold(ctx context.Context, args []string, s stdio) int {
	fs := newFlags("hold", holdHelp, s)
	rawURL := fs.String("url", "", "backend `URL` (default $DISTLOCK_URL)")
	key := fs.String("key", "", "lock key (required)")
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL; when given, overrides the URL's ttl=")
	maxHold := fs.Duration("max", time.Minute, "give up and exit after this long")
	if code, ok := parseFlags(fs, args, s); !ok {
		return code
	}
	if !fs.Changed("url") {
		*rawURL = os.Getenv("DISTLOCK_URL")
	}
	switch {
	case *rawURL == "":
		return usageError(s, "hold", "no backend URL: pass --url or set DISTLOCK_URL")
	case *key == "":
		return usageError(s, "hold", "--key is required")
	}
	errMax := fmt.Errorf("--max %v ran out", *maxHold)
	ctx, cancel := context.WithTimeoutCause(ctx, *maxHold, errMax)
	defer cancel()
	l, err := openLocker(ctx, *rawURL)
	if err != nil {
		fmt.Fprintf(s.err, "distlock hold: %s\n", errText(err))
		return openFailed(err)
	}
	defer l.Close()
	opts := append([]distlock.CallOption{distlock.WithAutoRenew(true)}, leaseTTL(*rawURL, *ttl, fs.Changed("ttl"))...)
	lease, err := l.Acquire(ctx, *key, opts...)
	if err != nil {
		fmt.Fprintf(s.err, "distlock hold: %q not acquired: %s\n", *key, waitError(ctx, err))
		return exitNotAcquired
	}
	fmt.Fprintf(s.out, "HELD %d\n", lease.Token())
	select {
	case <-lease.Done():
		fmt.Fprintf(s.err, "distlock hold: %s\n", errText(lease.Err()))
		return exitLeaseLost
	case <-ctx.Done():
		return exitOK
	}
}
