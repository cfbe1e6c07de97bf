package testserver

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

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
		if attempt == 1 {
			preferPorts(ports, sp.nports, cfg.preferPorts)
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
