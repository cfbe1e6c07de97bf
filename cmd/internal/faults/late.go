package faults

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// lateToxic ("late") holds the first Count chunks that reach it for Hold ms
// each and passes everything else at once: a request held up in the
// network (a congested link, a proxy) while the client, past its read
// timeout, resends it on a new connection that gets through. The held
// chunk is delivered even after the client closed its connection, as the
// kernel delivers what a socket sent before it closed.
type lateToxic struct {
	Hold  int64 `json:"hold"`  // ms
	Count int64 `json:"count"` // chunks to hold, over every connection of the proxy

	once sync.Once
	left atomic.Int64
}

// lateState is one connection's chunk on hold when the link's toxics
// change (another fault adds or removes one): the toxic is interrupted, and
// its next run holds the chunk on rather than holding up the change, which
// would hold up the proxy's new connections too.
type lateState struct{ held *stream.StreamChunk }

func (t *lateToxic) NewState() any { return new(lateState) }

func (t *lateToxic) Pipe(stub *toxics.ToxicStub) {
	t.once.Do(func() { t.left.Store(t.Count) }) // Pipe runs again when the link's toxics change
	st, _ := stub.State.(*lateState)
	if st == nil {
		st = new(lateState)
	}
	if c := st.held; c != nil {
		st.held = nil
		if !t.deliver(stub, st, c) {
			return
		}
	}
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if t.left.Add(-1) >= 0 {
				if !t.deliver(stub, st, c) {
					return
				}
				continue
			}
			stub.Output <- c
		}
	}
}

// deliver passes c on once its hold is over; false if the toxic was
// interrupted first, c then kept in st for the next run.
func (t *lateToxic) deliver(stub *toxics.ToxicStub, st *lateState, c *stream.StreamChunk) bool {
	timer := time.NewTimer(time.Until(c.Timestamp.Add(time.Duration(t.Hold) * time.Millisecond)))
	defer timer.Stop()
	select {
	case <-timer.C:
		stub.Output <- c
		return true
	case <-stub.Interrupt:
		st.held = c
		return false
	}
}

// Cleanup delivers a chunk still on hold when the toxic is removed.
func (t *lateToxic) Cleanup(stub *toxics.ToxicStub) {
	if st, _ := stub.State.(*lateState); st != nil && st.held != nil {
		_ = stub.WriteOutput(st.held, 5*time.Second)
		st.held = nil
	}
}

func init() { toxics.Register("late", new(lateToxic)) }
