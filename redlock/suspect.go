package redlock

import (
	"context"
	"errors"
	"net"
	"time"
)

// suspectFor is how long a node whose call timed out stays a suspect: an
// attempt does not wait for a suspect's answer once the others decide it
// (see gatherHopeful). Any answer from the node clears it sooner.
const suspectFor = 5 * time.Second

// noteCall records how a call to the node ended: a timeout makes it a
// suspect (it may hang), an answer clears that. Other failures (a refused
// connection) say nothing of a hang: they come back at once.
func (nd *node) noteCall(err error) {
	switch {
	case err == nil:
		if nd.timedOut.Load() != 0 {
			nd.timedOut.Store(0)
		}
	case timedOut(err):
		nd.timedOut.Store(time.Now().UnixNano())
	}
}

// timedOut reports whether err is a timeout. A function of its own: the
// net.Error it fills escapes, and an answered call should not pay for it.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// suspect reports whether the node's last call timed out, recently.
func (nd *node) suspect(now time.Time) bool {
	at := nd.timedOut.Load()
	return at != 0 && now.UnixNano()-at < int64(suspectFor)
}

// suspects returns which nodes are suspects now.
func (b *backend) suspects() map[int]bool {
	var s map[int]bool
	now := time.Now()
	for i, nd := range b.nodes {
		if nd.suspect(now) {
			if s == nil {
				s = map[int]bool{}
			}
			s[i] = true
		}
	}
	return s
}
