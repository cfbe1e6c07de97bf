package zookeeper

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// partition is a loopback TCP proxy that models the network between one
// client and a server: each direction can be dropped silently, and replies
// delayed. While the server→client direction is dropped the client's
// socket is never closed, even when the server's side ends (a real
// partition delivers no FIN or RST): the client learns of nothing but
// silence. Unlike relay, it delays and keeps the server's FIN too.
type partition struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	c2s    bool          // drop client→server bytes
	s2c    bool          // drop server→client bytes
	delay  time.Duration // server→client delay
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

func newPartition(t testing.TB, target string) *partition {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partition{ln: ln, target: target, conns: make(map[net.Conn]struct{}), done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *partition) addr() string { return p.ln.Addr().String() }

// set drops (true) or passes each direction from now on.
func (p *partition) set(c2s, s2c bool) {
	p.mu.Lock()
	p.c2s, p.s2c = c2s, s2c
	p.mu.Unlock()
}

// setDelay delays the server's bytes by d from when they reach the proxy.
func (p *partition) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *partition) state() (c2s, s2c bool, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c2s, p.s2c, p.delay
}

func (p *partition) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *partition) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *partition) serve(client net.Conn) {
	defer p.wg.Done()
	defer client.Close()
	if !p.track(client) {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		// Refused: hang like a partition if it is on, else fail fast.
		if _, s2c, _ := p.state(); s2c {
			<-p.done
		}
		return
	}
	defer server.Close()
	if !p.track(server) {
		return
	}
	clientGone := make(chan struct{})
	go func() { // client → server
		defer close(clientGone)
		defer server.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if c2s, _, _ := p.state(); !c2s {
					if _, werr := server.Write(buf[:n]); werr != nil {
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	type chunk struct {
		at time.Time
		b  []byte // nil: the server's FIN
	}
	q := make(chan chunk, 4096)
	go func() { // server → client, read side
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
			if n > 0 {
				q <- chunk{time.Now(), buf[:n]}
			}
			if err != nil {
				q <- chunk{time.Now(), nil} // the FIN is delayed like the bytes
				return
			}
		}
	}()
	for ch := range q { // server → client, write side
		_, _, d := p.state()
		if wait := time.Until(ch.at.Add(d)); wait > 0 {
			time.Sleep(wait)
		}
		if _, s2c, _ := p.state(); s2c || ch.b == nil {
			continue
		}
		if _, err := client.Write(ch.b); err != nil {
			return
		}
	}
	// The server's side ended. In a partition the client hears nothing of it.
	if _, s2c, _ := p.state(); s2c {
		select {
		case <-p.done:
		case <-clientGone:
		}
	}
}

func (p *partition) close() {
	p.ln.Close()
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// lossTimes records when each lease's Done closes.
func lossTimes(ctx context.Context, leases []*distlock.Lease) []chan time.Time {
	out := make([]chan time.Time, len(leases))
	for i, l := range leases {
		ch := make(chan time.Time, 1)
		out[i] = ch
		go func() {
			select {
			case <-l.Done():
				ch <- time.Now()
			case <-ctx.Done():
			}
		}()
	}
	return out
}

type grantResult struct {
	lease *distlock.Lease
	at    time.Time
	err   error
}

// waiter is a client queued on a key in the background.
type waiter struct {
	got chan grantResult

	mu      sync.Mutex
	tries   int   // failed attempts
	lastErr error // the last one's error
}

// acquireAsync waits for key in l, and tries again when the wait fails
// because the waiter's own connection broke (a server restart does that),
// until ctx ends. It sends the grant or the last error.
func acquireAsync(ctx context.Context, l distlock.Locker, key string) *waiter {
	w := &waiter{got: make(chan grantResult, 1)}
	go func() {
		for {
			lease, err := l.Acquire(ctx, key, distlock.WithTTL(time.Minute))
			if err == nil || ctx.Err() != nil || errors.Is(err, distlock.ErrClosed) {
				w.got <- grantResult{lease, time.Now(), err}
				return
			}
			w.mu.Lock()
			w.tries++
			w.lastErr = err
			w.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return w
}

// checkNoticeFirst waits for the grant and fails unless every held lease
// had reported its loss strictly before it.
func checkNoticeFirst(t *testing.T, ctx context.Context, fault time.Time, held []*distlock.Lease, lost []chan time.Time, w *waiter) {
	t.Helper()
	var g grantResult
	select {
	case g = <-w.got:
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("the waiter was never granted the lock (%d failed attempts; the last: %v)", w.tries, w.lastErr)
	}
	if g.err != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("waiter: %v (after %d failed attempts; the last: %v)", g.err, w.tries, w.lastErr)
	}
	defer g.lease.Release(context.Background())
	var first time.Time
	for i, h := range held {
		select {
		case <-h.Done():
		default:
			t.Fatalf("lease %d (%s): the waiter was granted the lock %v after the fault while this lease's Done was still open",
				i, h.Key(), g.at.Sub(fault).Round(time.Millisecond))
		}
		at := <-lost[i]
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if !at.Before(g.at) {
			t.Fatalf("lease %d: loss reported %v after the fault, grant %v after it", i,
				at.Sub(fault).Round(time.Millisecond), g.at.Sub(fault).Round(time.Millisecond))
		}
		if g.lease.Token() <= h.Token() {
			t.Fatalf("token %d after %d", g.lease.Token(), h.Token())
		}
	}
	t.Logf("first loss reported %v after the fault, lock granted to the waiter %v after it",
		first.Sub(fault).Round(time.Millisecond), g.at.Sub(fault).Round(time.Millisecond))
}

// setZKConf sets a millisecond setting in the server's zoo.cfg; it takes
// effect at the next Restart.
func setZKConf(t *testing.T, srv *testserver.Server, key string, d time.Duration) {
	t.Helper()
	path := filepath.Join(srv.Dir(), "zoo.cfg")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	var out []string
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.HasPrefix(line, key+"=") {
			line, found = key+"="+strconv.FormatInt(d.Milliseconds(), 10), true
		}
		out = append(out, line)
	}
	if !found {
		t.Fatalf("%s: no %s", path, key)
	}
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
