package zookeeper

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// TestFramesSplit feeds a stream of frames in chunks of every size and
// checks that each frame's head comes out once, whole, in order.
func TestFramesSplit(t *testing.T) {
	var stream []byte
	var want []string
	for i, n := range []int{0, 3, 16, 17, 40, 4, 1} {
		body := make([]byte, n)
		for j := range body {
			body[j] = byte(i*50 + j)
		}
		stream = binary.BigEndian.AppendUint32(stream, uint32(n))
		stream = append(stream, body...)
		want = append(want, fmt.Sprintf("%x", body[:min(n, 16)]))
	}
	for chunk := 1; chunk <= len(stream); chunk++ {
		f := frames{want: 16}
		var got []string
		for p := stream; len(p) > 0; {
			k := min(chunk, len(p))
			f.feed(p[:k], func(head []byte) { got = append(got, fmt.Sprintf("%x", head)) })
			p = p[k:]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("chunks of %d: heads %v, want %v", chunk, got, want)
		}
	}
	// want 0: one call per frame, at its length.
	f := frames{}
	calls := 0
	f.feed(bytes.Repeat(stream, 2), func([]byte) { calls++ })
	if calls != 2*len(want) {
		t.Fatalf("%d calls for %d frames", calls, 2*len(want))
	}
}

// scriptConn serves a fixed byte stream k bytes a Read and swallows writes.
type scriptConn struct {
	net.Conn
	r *bytes.Reader
	k int
}

func (c *scriptConn) Read(p []byte) (int, error)  { return c.r.Read(p[:min(len(p), c.k)]) }
func (c *scriptConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *scriptConn) Close() error                { return nil }

// TestLinkSmallestGrant: the link keeps the smallest timeout granted to a
// session, hands it to go-zookeeper in the connect response in place of a
// larger grant, and starts afresh with a new session. The reader takes
// the stream as go-zookeeper does (length, then body), or a byte at a
// time, and the server's bytes come whole or a byte at a time.
func TestLinkSmallestGrant(t *testing.T) {
	connectResp := func(ms int32, sid int64) []byte {
		b := binary.BigEndian.AppendUint32(nil, 0) // protocol version
		b = binary.BigEndian.AppendUint32(b, uint32(ms))
		b = binary.BigEndian.AppendUint64(b, uint64(sid))
		b = binary.BigEndian.AppendUint32(b, 16)
		b = append(b, make([]byte, 16)...) // password
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	}
	ping := []byte{0, 0, 0, 16, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0}
	for _, serverChunk := range []int{1, 1 << 10} {
		for _, readerChunk := range []int{0, 1} { // 0: as go-zookeeper reads
			l := newLink()
			connect := func(ms int32, sid int64) (seen int32) {
				t.Helper()
				stream := append(connectResp(ms, sid), ping...)
				c, err := l.dialer(func(string, string, time.Duration) (net.Conn, error) {
					return &scriptConn{r: bytes.NewReader(stream), k: serverChunk}, nil
				})("tcp", "x", time.Second)
				if err != nil {
					t.Fatal(err)
				}
				c.Write(make([]byte, 48)) // the connect request
				c.Write(ping)
				var got []byte
				if readerChunk == 0 {
					hdr := make([]byte, 4)
					if _, err := io.ReadFull(c, hdr); err != nil {
						t.Fatal(err)
					}
					body := make([]byte, binary.BigEndian.Uint32(hdr))
					if _, err := io.ReadFull(c, body); err != nil {
						t.Fatal(err)
					}
					rest, err := io.ReadAll(c)
					if err != nil {
						t.Fatal(err)
					}
					got = append(append(hdr, body...), rest...)
				} else {
					b := make([]byte, 1)
					for {
						n, err := c.Read(b)
						got = append(got, b[:n]...)
						if err == io.EOF {
							break
						}
						if err != nil {
							t.Fatal(err)
						}
					}
				}
				if len(got) != len(stream) {
					t.Fatalf("read %d bytes of %d", len(got), len(stream))
				}
				if want := append(connectResp(int32(binary.BigEndian.Uint32(got[8:12])), sid), ping...); !bytes.Equal(got, want) {
					t.Fatalf("the link changed more than the timeout:\n got %x\nwant %x", got, want)
				}
				return int32(binary.BigEndian.Uint32(got[8:12]))
			}
			check := func(step string, seen int32, wantSeen int32, granted, latest time.Duration) {
				t.Helper()
				if seen != wantSeen || l.granted() != granted || l.latestGrant() != latest {
					t.Fatalf("server chunks %d, reader %d, %s: go-zookeeper saw %d ms, granted %v, latest %v; want %d ms, %v, %v",
						serverChunk, readerChunk, step, seen, l.granted(), l.latestGrant(), wantSeen, granted, latest)
				}
			}
			check("created with 3 s", connect(3000, 7), 3000, 3*time.Second, 3*time.Second)
			check("back with 12 s", connect(12000, 7), 3000, 3*time.Second, 12*time.Second)
			check("back with 2 s", connect(2000, 7), 2000, 2*time.Second, 2*time.Second)
			check("back with 5 s", connect(5000, 7), 2000, 2*time.Second, 5*time.Second)
			check("expired", connect(0, 0), 0, 2*time.Second, 5*time.Second)
			check("new session with 12 s", connect(12000, 8), 12000, 12*time.Second, 12*time.Second)
		}
	}
}

// TestLinkShortHello: a connection that ends before or within the connect
// response hands over what came, then EOF, and records no grant.
func TestLinkShortHello(t *testing.T) {
	for _, stream := range [][]byte{nil, {0, 0}, {0, 0, 0, 3, 1, 2, 3}, {0, 0, 0, 40, 0, 0, 0, 0, 0, 0}} {
		l := newLink()
		c, _ := l.dialer(func(string, string, time.Duration) (net.Conn, error) {
			return &scriptConn{r: bytes.NewReader(stream), k: 1 << 10}, nil
		})("tcp", "x", time.Second)
		c.Write(make([]byte, 48))
		got, err := io.ReadAll(c)
		if err != nil || !bytes.Equal(got, stream) || l.granted() != 0 {
			t.Fatalf("stream %x: read %x, %v; granted %v", stream, got, err, l.granted())
		}
	}
}
