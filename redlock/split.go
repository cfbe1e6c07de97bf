package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
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
	var ne net.Error
	switch {
	case err == nil:
		if nd.timedOut.Load() != 0 {
			nd.timedOut.Store(0)
		}
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		nd.timedOut.Store(time.Now().UnixNano())
	}
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

// splitStreaks counts, per waiting Acquire (its Request.Waiter), the split
// votes in a row that only an unheard node could have decided. Contenders
// woken together split the same way again; a random pause sets them apart,
// and its range doubles with each split in a row (up to 8 times) so that
// many contenders spread out too.
type splitStreaks struct {
	mu sync.Mutex
	m  map[string]streak
}

type streak struct {
	n    int
	last time.Time
}

// maxStreaks bounds the map: a waiter that gave up mid-streak leaves its
// entry; past this many, entries older than a minute go.
const maxStreaks = 1024

// pause returns how long waiter should pause after one more split.
func (s *splitStreaks) pause(waiter string, nt time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.m == nil {
		s.m = map[string]streak{}
	}
	if len(s.m) >= maxStreaks {
		for w, st := range s.m {
			if now.Sub(st.last) > time.Minute {
				delete(s.m, w)
			}
		}
	}
	st, ok := s.m[waiter]
	st.n++
	st.last = now
	if ok || len(s.m) < maxStreaks {
		s.m[waiter] = st
	}
	return rand.N(2 * nt << min(st.n-1, 3))
}

// reset ends waiter's streak: its attempt was decided without an unheard
// node.
func (s *splitStreaks) reset(waiter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) > 0 {
		delete(s.m, waiter)
	}
}
