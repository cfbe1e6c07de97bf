package etcd

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// cuttableProxy forwards to addr; while cut, it closes every connection,
// new ones at once, so the client's connection attempts fail.
type cuttableProxy struct {
	ln    net.Listener
	addr  string
	cut   atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newCuttableProxy(t *testing.T, addr string) *cuttableProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{ln: ln, addr: addr}
	t.Cleanup(func() { _ = ln.Close(); p.closeAll() })
	go p.serve()
	return p
}

func (p *cuttableProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.addr)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}

func (p *cuttableProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// After an outage in which every connection attempt failed, the client
// reconnects within about a second of the network healing: gRPC's own
// pacing would wait up to its grown backoff (seconds) while leases lapse.
func TestReconnectsPromptlyAfterAnOutage(t *testing.T) {
	t.Parallel() // mostly waits out the outage
	e := newEnv(t)
	p := newCuttableProxy(t, e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := distlock.Open(ctx, "etcd://"+p.ln.Addr().String()+"/?prefix=reconnect&loss_watch=false")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.TryAcquire(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(ctx)

	p.cut.Store(true)
	p.closeAll()
	time.Sleep(6 * time.Second) // attempts fail and gRPC's pacing grows: 1 s, 1.6 s, 2.6 s …
	p.cut.Store(false)
	healed := time.Now()
	ls, err = l.TryAcquire(ctx, "after")
	if err != nil {
		t.Fatal(err)
	}
	_ = ls.Release(ctx)
	if d := time.Since(healed); d > 2*time.Second {
		t.Errorf("the first lock after the network healed took %v", d)
	}
}
