package zookeeper

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
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
