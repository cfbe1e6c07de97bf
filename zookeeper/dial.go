package zookeeper

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
)

// dialLog is what Dial's dials met before the first session: the last
// failure, for an ErrUnavailable that names its cause, and the servers that
// refused the client over TLS, for an ErrAccessDenied that comes as soon as
// each has (go-zookeeper itself retries a refusal for ever, a second apart).
type dialLog struct {
	hosts      *namedHosts // with TLS: the host provider
	tls        bool        // the dialer makes TLS connections
	mu         sync.Mutex
	lastErr    error
	refused    map[string]error
	allRefused chan struct{} // closed once every server has refused
}

func newDialLog() *dialLog {
	return &dialLog{hosts: &namedHosts{}, refused: map[string]error{}, allRefused: make(chan struct{})}
}

func (d *dialLog) failed(addr string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastErr = err
	if !tlsRefusal(err) {
		return
	}
	_, seen := d.refused[addr]
	d.refused[addr] = err
	if !seen && len(d.refused) == d.hosts.Len() {
		close(d.allRefused)
	}
}

// last returns the last failed dial, or nil.
func (d *dialLog) last() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastErr
}

// refusal returns the refusals, or nil if no server refused.
func (d *dialLog) refusal() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, err := range d.refused {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dialer returns Dial's dialer: TCP, then the TLS handshake when cfg is
// set. The handshake happens here, so go-zookeeper and the link (which
// reads the granted session timeout off the connect response) see the
// plaintext stream as before.
func (d *dialLog) dialer(cfg *tls.Config) zk.Dialer {
	d.tls = cfg != nil
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := d.dial(cfg, network, addr, timeout)
		if err != nil {
			d.failed(addr, err)
		}
		return c, err
	}
}

func (d *dialLog) dial(cfg *tls.Config, network, addr string, timeout time.Duration) (net.Conn, error) {
	if cfg == nil {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &plainConn{Conn: c, addr: addr, log: d}, nil
	}
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = d.hosts.name(addr)
	}
	// go-zookeeper gives a dial a second (its connectTimeout), meant for
	// TCP; a handshake with a server whose JVM is busy may need more, and
	// Dial waits ConnectTimeout for a session in any case.
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, ConnectTimeout))
	defer cancel()
	raw, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		if closedEarly(err) {
			// A plaintext port reads the ClientHello as a request of
			// absurd length and hangs up, with no TLS alert.
			err = fmt.Errorf("TLS handshake: %w: the server hung up without a TLS answer (is it the plaintext clientPort, not the secureClientPort?)", err)
		}
		return nil, err
	}
	return &tlsConn{Conn: c, addr: addr, log: d}, nil
}

// closedEarly reports whether err is the server hanging up.
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// plainConn notes a server that hangs up before its first byte: a TLS
// port does so on a plaintext connect request, with no alert (as does a
// server out of its quorum), which Dial's error then names.
type plainConn struct {
	net.Conn
	addr string
	log  *dialLog
	got  bool // a byte came; only read by the one reader
}

func (c *plainConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.got = true
	}
	if err != nil && !c.got && closedEarly(err) {
		c.log.failed(c.addr, fmt.Errorf("%w: the server hung up before answering the connect request (is it a TLS secureClientPort? then give ca_file, cert_file and key_file, or tls=true; a server out of its quorum does this too)", err))
	}
	return n, err
}

// tlsConn reports a refusal that comes after the handshake: with TLS 1.3
// the server checks the client's certificate after the client's handshake
// has ended, and its alert comes with the first read.
type tlsConn struct {
	*tls.Conn
	addr string
	log  *dialLog
}

func (c *tlsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && tlsRefusal(err) {
		c.log.failed(c.addr, err)
	}
	return n, err
}

// tlsRefusal reports whether err is a TLS answer rather than an outage: a
// server certificate the client does not trust (or that names another
// host), or an alert from the server (a client certificate it refused, no
// protocol version or cipher in common).
func tlsRefusal(err error) bool {
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// namedHosts is go-zookeeper's DNSHostProvider (each server's addresses
// resolved once, shuffled together, tried in turn) that remembers the name
// each address was resolved from: a TLS dial verifies the server's
// certificate for the name in the server list, not for the address.
type namedHosts struct {
	mu         sync.Mutex
	addrs      []string
	names      map[string]string // address → host name
	curr, last int
}

// Init resolves the servers, within a few seconds as go-zookeeper does.
func (h *namedHosts) Init(servers []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var r net.Resolver
	names := map[string]string{}
	var addrs []string
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return err
		}
		ips, err := r.LookupHost(ctx, host)
		if err != nil {
			return err
		}
		for _, ip := range ips {
			a := net.JoinHostPort(ip, port)
			names[a] = host
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return fmt.Errorf("zookeeper: no address for %q", servers)
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addrs, h.names, h.curr, h.last = addrs, names, -1, -1
	return nil
}

// Len returns how many addresses there are.
func (h *namedHosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.addrs)
}

// Next returns the next address; retryStart is true once every address
// has been tried since the last connection.
func (h *namedHosts) Next() (addr string, retryStart bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.addrs)
	retryStart = h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.addrs[h.curr], retryStart
}

// Connected notes a connection to the current address.
func (h *namedHosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}

// name returns the host name addr was resolved from (its host if unknown:
// a host provider of the caller's replaced this one).
func (h *namedHosts) name(addr string) string {
	h.mu.Lock()
	n, ok := h.names[addr]
	h.mu.Unlock()
	if ok {
		return n
	}
	host, _, _ := net.SplitHostPort(addr)
	return host
}
