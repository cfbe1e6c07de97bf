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
// HoldNext delays only the next few matching chunks: a client that resends
// after its read timeout, on a new connection, gets through at once while
// the first copy is still on its way (a request that lands late, and twice).
type DelayProxy struct {
	Slow  atomic.Bool
	Delay time.Duration
	Match []byte
	ln    net.Listener

	hold      atomic.Int32 // chunks still to delay (HoldNext)
	holdMatch atomic.Pointer[[]byte]
}

// HoldNext delays the next n chunks that contain match by Delay, whether
// Slow is set or not.
func (p *DelayProxy) HoldNext(n int32, match []byte) {
	p.holdMatch.Store(&match)
	p.hold.Store(n)
}

// held reports whether chunk b is to be delayed.
func (p *DelayProxy) held(b []byte) bool {
	if p.Slow.Load() && (p.Match == nil || bytes.Contains(b, p.Match)) {
		return true
	}
	if m := p.holdMatch.Load(); m == nil || !bytes.Contains(b, *m) {
		return false
	}
	for {
		n := p.hold.Load()
		if n <= 0 {
			return false
		}
		if p.hold.CompareAndSwap(n, n-1) {
			return true
		}
	}
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
			if p.held(buf[:n]) {
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
