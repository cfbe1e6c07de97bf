package testutil

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// DelayProxy forwards TCP to a server; while Slow is set, each
// client-to-server chunk (only those containing Match, if set) is delivered
// Delay later, in order, as a segment held up by retransmission is: the
// kernel still sends what a client wrote before it closed the socket.
type DelayProxy struct {
	Slow  atomic.Bool
	Delay time.Duration
	Match []byte
	ln    net.Listener
}

// NewDelayProxy listens on a free loopback port and forwards to addr until
// the test ends.
func NewDelayProxy(t testing.TB, addr string, delay time.Duration) *DelayProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &DelayProxy{ln: ln, Delay: delay}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
			go p.up(c, s)
		}
	}()
	return p
}

// Addr is the proxy's address.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

type chunk struct {
	at time.Time
	b  []byte
}

func (p *DelayProxy) up(c, s net.Conn) {
	q := make(chan chunk, 1024)
	go func() {
		for ch := range q {
			time.Sleep(time.Until(ch.at))
			if _, err := s.Write(ch.b); err != nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond) // the reply has somewhere to go
		_ = s.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			at := time.Now()
			if p.Slow.Load() && (p.Match == nil || bytes.Contains(buf[:n], p.Match)) {
				at = at.Add(p.Delay)
			}
			q <- chunk{at, append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			close(q)
			return
		}
	}
}
