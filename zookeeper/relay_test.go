package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// relay is a loopback TCP proxy in front of a ZooKeeper server, one per
// client under test. It lets a test sever a client's connection without
// the client sending closeSession (a crash), swallow replies (a lost
// reply), hold reconnections back, and learn each session's password from
// the server's connect response (to expire the session on purpose). A raw
// relay (newRawRelay) only copies bytes: through TLS it cannot read them.
type relay struct {
	ln     net.Listener
	target string
	book   *sessionBook
	raw    bool

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	hold    chan struct{} // non-nil: new connections wait until it is closed
	swallow bool          // drop server→client bytes
	mute    bool          // drop client→server bytes
	// noSetWatches: new connections drop the client's SetWatches
	// requests (the server never re-arms its watches after a reconnection).
	noSetWatches bool
	wg           sync.WaitGroup
}

// sessionBook maps session ids to their password and relay.
type sessionBook struct {
	mu sync.Mutex
	m  map[int64]sessionInfo
}

type sessionInfo struct {
	passwd []byte
	relay  *relay
}

func (sb *sessionBook) put(id int64, info sessionInfo) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.m == nil {
		sb.m = make(map[int64]sessionInfo)
	}
	sb.m[id] = info
}

func (sb *sessionBook) get(id int64) (sessionInfo, bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	info, ok := sb.m[id]
	return info, ok
}

func newRelay(t testing.TB, target string, book *sessionBook) *relay {
	t.Helper()
	return startRelay(t, &relay{target: target, book: book})
}

// newRawRelay is a relay that reads nothing of what it copies (a TLS
// stream): it can cut, sever, hold and mute, but learns no password.
func newRawRelay(t testing.TB, target string) *relay {
	t.Helper()
	return startRelay(t, &relay{target: target, raw: true})
}

func startRelay(t testing.TB, r *relay) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.ln, r.conns = ln, make(map[net.Conn]struct{})
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) serve(client net.Conn) {
	defer r.wg.Done()
	defer client.Close()
	r.mu.Lock()
	hold, noSetWatches := r.hold, r.noSetWatches
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	server, err := net.DialTimeout("tcp", r.target, 2*time.Second)
	if err != nil {
		return
	}
	defer server.Close()
	if !r.track(client) || !r.track(server) {
		return
	}
	go func() {
		defer server.Close()
		if noSetWatches {
			r.forwardFrames(client, server)
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				r.mu.Lock()
				drop := r.mute
				r.mu.Unlock()
				if !drop {
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
	if !r.raw && !r.relayHello(client, server) {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			r.mu.Lock()
			drop := r.swallow
			r.mu.Unlock()
			if !drop {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// relayHello copies the first frame from the server, the connect response,
// and notes the session's password; false if the connection ended.
func (r *relay) relayHello(client, server net.Conn) bool {
	var hdr [4]byte
	if _, err := io.ReadFull(server, hdr[:]); err != nil {
		return false
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(server, body); err != nil {
		return false
	}
	if len(body) >= 20 {
		id := int64(binary.BigEndian.Uint64(body[8:16]))
		n := int(binary.BigEndian.Uint32(body[16:20]))
		if id != 0 && len(body) >= 20+n {
			r.book.put(id, sessionInfo{passwd: append([]byte(nil), body[20:20+n]...), relay: r})
		}
	}
	_, err := client.Write(append(hdr[:], body...))
	return err == nil
}

// forwardFrames copies the client's requests to the server whole, but for
// SetWatches (opcode 101), which it drops.
func (r *relay) forwardFrames(client, server net.Conn) {
	const opSetWatches = 101
	for first := true; ; first = false {
		body, err := readFrame(client)
		if err != nil {
			return
		}
		r.mu.Lock()
		drop := r.mute
		r.mu.Unlock()
		// The first frame is the connect request, without a header.
		if !first && len(body) >= 8 && int32(binary.BigEndian.Uint32(body[4:8])) == opSetWatches {
			drop = true
		}
		if !drop {
			if err := writeFrame(server, body); err != nil {
				return
			}
		}
	}
}

// setNoSetWatches makes the connections made from now on drop SetWatches.
func (r *relay) setNoSetWatches(on bool) {
	r.mu.Lock()
	r.noSetWatches = on
	r.mu.Unlock()
}

// sever closes the current connections; the client may reconnect.
func (r *relay) sever() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
		delete(r.conns, c)
	}
}

// cut severs the connections and refuses new ones for good: the client is
// cut off as a crashed process would be, without a closeSession.
func (r *relay) cut() {
	r.ln.Close()
	r.sever()
}

// holdNew makes new connections wait until the returned func is called.
func (r *relay) holdNew() (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.hold = ch
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.hold = nil
			r.mu.Unlock()
			close(ch)
		})
	}
}

// setSwallow starts or stops dropping the server's replies.
func (r *relay) setSwallow(on bool) {
	r.mu.Lock()
	r.swallow = on
	r.mu.Unlock()
}

// setBlackhole starts or stops dropping the bytes both ways, on the open
// connections and on new ones, which stay open: a silent partition, which
// neither end notices but by its own timeouts.
func (r *relay) setBlackhole(on bool) {
	r.mu.Lock()
	r.swallow, r.mute = on, on
	r.mu.Unlock()
}

func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}

// expireSession ends a session on the server the classic way: connect with
// its id and password (which moves the session to this connection and
// closes the owner's) and send closeSession. The owner learns on its
// reconnection that the session expired.
func expireSession(ctx context.Context, addr string, id int64, passwd []byte, timeout time.Duration) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	req := binary.BigEndian.AppendUint32(nil, 0) // protocol version
	req = binary.BigEndian.AppendUint64(req, 0)  // last zxid seen
	req = binary.BigEndian.AppendUint32(req, uint32(timeout.Milliseconds()))
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	req = append(req, 0) // read-only: false
	if err := writeFrame(c, req); err != nil {
		return err
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("connect response: %w", err)
	}
	if len(resp) < 16 {
		return errors.New("short connect response")
	}
	if binary.BigEndian.Uint64(resp[8:16]) == 0 {
		return nil // already expired
	}
	closeReq := binary.BigEndian.AppendUint32(nil, 1)                      // xid
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xFFFFFFF5)) // opCloseSession (-11)
	if err := writeFrame(c, closeReq); err != nil {
		return err
	}
	reply, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("closeSession reply: %w", err)
	}
	if len(reply) < 16 {
		return errors.New("short closeSession reply")
	}
	if code := int32(binary.BigEndian.Uint32(reply[12:16])); code != 0 {
		return fmt.Errorf("closeSession: error %d", code)
	}
	return nil
}

func writeFrame(w io.Writer, body []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r, body)
	return body, err
}
