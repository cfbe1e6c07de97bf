package zookeeper

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// link watches the TCP connections of a *zk.Conn that Dial made, through
// its dialer. go-zookeeper keeps to itself both facts the loss notice
// depends on: the session timeout the server granted (it may be lower than
// the one asked for: the server clamps it into [minSessionTimeout,
// maxSessionTimeout]), and when the server last heard from the session.
// The link reads both off the wire: the first frame the server sends on
// every connection is the connect response (int32 protocol version, int32
// timeout in ms, int64 session id, password), and a session's requests are
// answered in the order they were sent, every one of them (pings included),
// so the send time of the request behind each reply is known.
//
// The timeout that binds is the smallest one granted to the session, not
// the newest: the server stores a session's timeout when it creates the
// session, and a restarted server (or a new leader) restores the session
// with that one, whatever a later connection was granted (more, if
// minSessionTimeout was raised meanwhile). So the link keeps the smallest
// timeout granted to the current session, and hands it to go-zookeeper in
// place of a larger grant: go-zookeeper's pings (every third of the
// timeout), its read timeout (two thirds) and the timeout it asks for on
// reconnection then follow the smaller timeout too. Without that, a
// session idle on a healthy link would be pinged less often than the
// silence bound, and reported lost.
type link struct {
	origin  time.Time    // the monotonic clock's zero for heard
	dials   atomic.Int64 // connections made through the link
	timeout atomic.Int64 // smallest timeout granted to the session (ns); 0 before a session
	latest  atomic.Int64 // the timeout granted on the newest connection (ns)
	heard   atomic.Int64 // since origin (ns): send time of the newest request answered

	mu   sync.Mutex
	sid  int64     // the session timeout belongs to
	live *linkConn // the connection the session runs on
}

func newLink() *link { return &link{origin: time.Now()} }

// dialer wraps d so that the link sees every connection it makes.
func (l *link) dialer(d zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		l.dials.Add(1)
		return &linkConn{Conn: c, l: l, in: frames{want: 16}, hello: true}, nil
	}
}

func (l *link) now() int64 { return int64(time.Since(l.origin)) }

// granted returns the smallest session timeout the server granted to the
// current session (at its creation or on any later connection), or 0 if no
// session was made through the link. It is the timeout the server may
// expire the session on.
func (l *link) granted() time.Duration { return time.Duration(l.timeout.Load()) }

// latestGrant returns the timeout granted on the newest connection; it is
// at least granted() while the session lasts.
func (l *link) latestGrant() time.Duration { return time.Duration(l.latest.Load()) }

// grant records that a connection of session sid was granted timeout d and
// returns the smallest timeout granted to sid so far. A new session id
// starts afresh.
func (l *link) grant(sid int64, d time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.latest.Store(int64(d))
	if sid != l.sid || d < time.Duration(l.timeout.Load()) {
		l.sid = sid
		l.timeout.Store(int64(d))
	}
	return time.Duration(l.timeout.Load())
}

// silenceLeft returns how long until the silence bound of the session's
// smallest granted timeout has passed since the server last heard from
// the session.
func (l *link) silenceLeft() time.Duration {
	return time.Duration(l.heard.Load()) + silenceBound(l.granted()) - time.Duration(l.now())
}

// heardAt records that the server heard from the session at t (since
// origin); heard only moves forward.
func (l *link) heardAt(t int64) {
	for {
		old := l.heard.Load()
		if t <= old || l.heard.CompareAndSwap(old, t) {
			return
		}
	}
}

// drop closes the connection the session runs on, as go-zookeeper does
// when it has heard nothing for two thirds of the session timeout; it then
// reconnects.
func (l *link) drop() {
	l.mu.Lock()
	c := l.live
	l.live = nil
	l.mu.Unlock()
	if c != nil {
		c.Conn.Close()
	}
}

// silenceBound is the longest the backend lets the server go unheard from
// before it reports the session's leases lost: two thirds of the session
// timeout (the smallest granted to the session). The server cannot expire
// the session sooner than the full timeout after the request it last
// answered was sent, so a third of the timeout is left for timer lateness;
// in an ensemble a follower's lag can take it (see the package
// documentation). It is also go-zookeeper's own read timeout (the link
// hands go-zookeeper the same timeout), so it drops a link this silent
// anyway.
func silenceBound(timeout time.Duration) time.Duration { return timeout * 2 / 3 }

// linkConn is one connection made through a link.
type linkConn struct {
	net.Conn
	l *link

	mu   sync.Mutex
	out  frames  // the request stream
	sent []int64 // send times of the requests not answered yet, oldest first
	in   frames  // the reply stream (read by one goroutine at a time)
	read int     // frames read so far

	// The reader's alone, like in.
	hello   bool   // the connect response's head is still to be read
	pend    []byte // bytes read but not yet handed to the reader
	pendErr error  // the error that ended the read of pend
	lower   int32  // the timeout (ms) the connect response is to carry instead; 0: as granted
}

// Write notes the send time of each request that starts in p, before the
// server can answer it. A request counts as sent when its write begins:
// the server cannot have received it earlier.
func (c *linkConn) Write(p []byte) (int, error) {
	now := c.l.now()
	c.mu.Lock()
	c.out.feed(p, func([]byte) { c.sent = append(c.sent, now) })
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *linkConn) Read(p []byte) (int, error) {
	if c.hello {
		c.hello = false
		c.readHello()
	}
	if len(c.pend) > 0 || c.pendErr != nil {
		n := copy(p, c.pend)
		c.pend = c.pend[n:]
		if len(c.pend) > 0 {
			return n, nil
		}
		err := c.pendErr
		c.pend, c.pendErr = nil, nil
		return n, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.in.feed(p[:n], c.reply)
	}
	return n, err
}

// readHello reads the connect response's length and first 16 bytes (all
// of it if shorter) into pend, before any of it reaches go-zookeeper, and
// puts the session's smallest granted timeout in place of a larger one.
func (c *linkConn) readHello() {
	buf := make([]byte, 4, 20)
	n, err := io.ReadFull(c.Conn, buf)
	if err == nil {
		body := uint32(16)
		if l := binary.BigEndian.Uint32(buf); l < body {
			body = l
		}
		buf = buf[:4+body]
		var k int
		k, err = io.ReadFull(c.Conn, buf[4:])
		n += k
	}
	buf = buf[:n]
	c.in.feed(buf, c.reply) // sets lower
	if c.lower > 0 && len(buf) >= 12 {
		binary.BigEndian.PutUint32(buf[8:12], uint32(c.lower))
	}
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	c.pend, c.pendErr = buf, err
}

func (c *linkConn) Close() error {
	c.l.mu.Lock()
	if c.l.live == c {
		c.l.live = nil
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// reply handles the first 16 bytes of a frame from the server. A reply
// pairs with the oldest request not yet answered; a watch notification
// (xid -1) answers none. Should a request ever go unanswered, later replies
// pair with earlier send times: an error on the safe side.
func (c *linkConn) reply(head []byte) {
	c.mu.Lock()
	first := c.read == 0
	c.read++
	var sent int64
	ok := len(c.sent) > 0
	if first || len(head) < 4 || int32(binary.BigEndian.Uint32(head)) != -1 {
		if ok {
			sent, c.sent = c.sent[0], c.sent[1:]
		}
	} else {
		ok = false
	}
	c.mu.Unlock()
	if first {
		// The connect response. Session id 0: the session has expired.
		if len(head) < 16 || int64(binary.BigEndian.Uint64(head[8:16])) == 0 || !ok {
			return
		}
		ms := int32(binary.BigEndian.Uint32(head[4:8]))
		if ms <= 0 {
			return
		}
		// The session's smallest grant binds: go-zookeeper is to see it
		// (readHello) if this one is larger.
		d := time.Duration(ms) * time.Millisecond
		if least := c.l.grant(int64(binary.BigEndian.Uint64(head[8:16])), d); least < d {
			c.lower = int32(least / time.Millisecond)
		}
		c.l.heardAt(sent)
		c.l.mu.Lock()
		c.l.live = c
		c.l.mu.Unlock()
		return
	}
	if ok {
		c.l.heardAt(sent)
	}
}

// frames splits a byte stream into ZooKeeper's frames (a big-endian int32
// length, then the body) and hands the first want bytes of each body (all
// of it if shorter) to a callback as soon as they have passed.
type frames struct {
	want int
	hdr  [4]byte
	nh   int // header bytes seen
	left int // body bytes still to come
	head []byte
	told bool // the callback has had this frame
}

func (f *frames) feed(p []byte, fn func(head []byte)) {
	for len(p) > 0 {
		if f.nh < 4 {
			k := copy(f.hdr[f.nh:], p)
			f.nh += k
			p = p[k:]
			if f.nh < 4 {
				return
			}
			f.left = int(binary.BigEndian.Uint32(f.hdr[:]))
			f.head, f.told = f.head[:0], false
			if f.want == 0 || f.left == 0 {
				fn(f.head)
				f.told = true
			}
			if f.left == 0 {
				f.nh = 0
			}
			continue
		}
		k := min(len(p), f.left)
		if !f.told {
			f.head = append(f.head, p[:min(k, f.want-len(f.head))]...)
			if len(f.head) == f.want {
				fn(f.head)
				f.told = true
			}
		}
		f.left -= k
		p = p[k:]
		if f.left == 0 {
			if !f.told {
				fn(f.head)
				f.told = true
			}
			f.nh = 0
		}
	}
}
