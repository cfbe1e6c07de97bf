package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Refreshing: see "Renewal" in docs/backends/zookeeper.md. In short, a
// refresh confirms that the znode still exists with our czxid and our
// session as its ephemeral owner. With New every refresh reads every znode
// of its batch. With Dial the events reach onEvent in order with the
// replies, so a znode read once with a data watch (GetW) needs no read of
// its own after that, on the same connection: one read sent after the
// refresh began and answered suffices for the whole batch, since any
// deletion the server applied before answering has reached onEvent by
// then. A znode whose watch fired without a deletion is read again with a
// watch; one last read on an older connection (the events missed meanwhile
// may come after the replies on the new one) is read again (Exists).

// maxStats bounds the requests one refresh call has in flight: they are
// pipelined on the connection, one goroutine each (go-zookeeper's calls
// block).
const maxStats = 16

// refreshRounds bounds the rounds of a refresh whose connection keeps
// changing under it.
const refreshRounds = 3

// Refresh confirms our znode still exists: see above.
func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	batch := []driver.Refresh{{Grant: g, TTL: ttl}}
	if err := b.RefreshBatch(ctx, batch); err != nil {
		return 0, err
	}
	return batch[0].Validity, batch[0].Err
}

// RefreshBatch implements driver.Backend.RefreshBatch: one round trip for the
// batch, with Dial (see above), or one pipelined Exists per znode.
func (b *backend) RefreshBatch(ctx context.Context, batch []driver.Refresh) error {
	conn := b.conn.Load()
	nodes := make([]*node, len(batch))
	pending := make([]int, 0, len(batch))
	for i := range batch {
		n, ok := batch[i].Grant.Handle.(*node)
		if !ok {
			batch[i].Err = fmt.Errorf("zookeeper: grant of another backend (%T)", batch[i].Grant.Handle)
			continue
		}
		if err := b.sessionGone(conn, n); err != nil {
			batch[i].Err = err
			continue
		}
		nodes[i] = n
		pending = append(pending, i)
	}
	for round := 0; len(pending) > 0; round++ {
		if round == refreshRounds {
			for _, i := range pending {
				batch[i].Err = fmt.Errorf("zookeeper: %s: the connection changed during each of %d reads", nodes[i].path, refreshRounds)
			}
			break
		}
		checks, byWatch := b.plan(batch, nodes, pending)
		if err := b.stat(ctx, conn, checks); err != nil {
			return err
		}
		pending = b.settle(batch, nodes, checks, byWatch)
	}
	// A lease lost meanwhile (the grace, the session's end) is not held,
	// whatever was read.
	for i := range batch {
		if nodes[i] != nil && batch[i].Err == nil {
			if err := b.sessionGone(conn, nodes[i]); err != nil {
				batch[i].Validity, batch[i].Err = 0, err
			}
		}
	}
	return nil
}

// sessionGone reports, as ErrNotHeld, that n's session is over for us:
// its epoch ended (expiry, or given up after the grace, in which case the
// janitor deletes the znode), or the connection runs another session.
func (b *backend) sessionGone(conn *zk.Conn, n *node) error {
	if closed, _ := b.sess.ended(n); closed {
		b.sess.forget(n)
		return fmt.Errorf("%w: session %#x lost", distlock.ErrNotHeld, n.session)
	}
	if sid := conn.SessionID(); sid != 0 && sid != n.session {
		b.sess.forget(n)
		return fmt.Errorf("%w: session %#x has ended", distlock.ErrNotHeld, n.session)
	}
	return nil
}

// check is one read of a znode in a refresh.
type check struct {
	i     int    // its index in the batch
	n     *node  //
	watch bool   // GetW (sets a data watch) rather than Exists
	seq   uint64 // n.armSeq when planned
	conns uint64 // sessionState.conns when planned

	exists         bool
	czxid, session int64
	err            error
}

// plan splits the pending grants into those to read and those the watch
// answers for; the latter need one read of any kind after it, so one of
// them is read if nothing else is.
func (b *backend) plan(batch []driver.Refresh, nodes []*node, pending []int) (checks []check, byWatch []int) {
	s := &b.sess
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range pending {
		n := nodes[i]
		switch {
		case n.gone:
			s.forgetLocked(n)
			batch[i].Err = fmt.Errorf("%w: %s is gone", distlock.ErrNotHeld, n.path)
		case b.watches && n.armed && n.checked == s.conns:
			byWatch = append(byWatch, i)
		default:
			checks = append(checks, check{i: i, n: n, watch: b.watches && !n.armed, seq: n.armSeq, conns: s.conns})
		}
	}
	if len(checks) == 0 && len(byWatch) > 0 {
		i := byWatch[0]
		byWatch = byWatch[1:]
		checks = append(checks, check{i: i, n: nodes[i], seq: nodes[i].armSeq, conns: s.conns})
	}
	return checks, byWatch
}

// settle records the reads' outcomes and the watch's answers, and returns
// the grants to read again: those whose watch fired, or which the reads
// reached over a newer connection than the one they were last seen on.
func (b *backend) settle(batch []driver.Refresh, nodes []*node, checks []check, byWatch []int) (again []int) {
	s := &b.sess
	s.mu.Lock()
	defer s.mu.Unlock()
	// Every read has been answered: the events sent before the last of
	// them have been handled, on the connection counted now or an older
	// one.
	conns := s.conns
	for _, c := range checks {
		n := c.n
		switch {
		case c.err != nil:
			batch[c.i].Err = c.err
		case !c.exists || c.czxid != n.czxid || c.session != n.session:
			n.gone = true
			s.forgetLocked(n)
			batch[c.i].Err = fmt.Errorf("%w: %s is gone", distlock.ErrNotHeld, n.path)
		default:
			batch[c.i].Validity = batch[c.i].TTL
			// Trust the watch from now on if no event came since the
			// read was planned (else it may have fired after the read),
			// and the read was sent and answered on one connection.
			if b.watches && n.armSeq == c.seq && (c.watch || n.armed) {
				n.armed = true
				if c.conns == conns {
					n.checked = conns
				}
			}
		}
	}
	for _, i := range byWatch {
		n := nodes[i]
		switch {
		case n.gone:
			s.forgetLocked(n)
			batch[i].Err = fmt.Errorf("%w: %s is gone", distlock.ErrNotHeld, n.path)
		case n.armed && n.checked == conns:
			batch[i].Validity = batch[i].TTL
		default:
			again = append(again, i)
		}
	}
	return again
}

// stat runs the reads, pipelined from at most maxStats goroutines. If ctx
// ends first it returns ctx's error; the reads still running finish on
// their own (go-zookeeper answers or fails every request within about a
// session timeout, at once after Close) and write only to checks.
func (b *backend) stat(ctx context.Context, conn *zk.Conn, checks []check) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(checks) == 0 {
		return nil
	}
	workers := min(len(checks), maxStats)
	var (
		next atomic.Int64
		left atomic.Int64 // workers still running; the last closes done
		done = make(chan struct{})
	)
	left.Store(int64(workers))
	work := func() {
		defer func() {
			if left.Add(-1) == 0 {
				close(done)
			}
		}()
		for {
			k := int(next.Add(1)) - 1
			if k >= len(checks) {
				return
			}
			c := &checks[k]
			if err := ctx.Err(); err != nil {
				c.err = err
				continue
			}
			b.refreshReads.Add(1)
			var st *zk.Stat
			if c.watch {
				_, st, _, c.err = conn.GetW(c.n.path)
				c.exists = c.err == nil
				if errors.Is(c.err, zk.ErrNoNode) {
					c.err = nil
				}
			} else {
				c.exists, st, c.err = conn.Exists(c.n.path)
			}
			if c.err == nil && c.exists {
				c.czxid, c.session = st.Czxid, st.EphemeralOwner
			}
		}
	}
	for range workers {
		go work()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// nodeEvent handles a watch event (Dial: on go-zookeeper's reading
// goroutine, before the replies that follow it). An event on a held
// znode's path fires its watch: a deletion ends it, anything else leaves
// it unwatched until its next refresh reads it again with a watch.
func (s *sessionState) nodeEvent(ev zk.Event) {
	if ev.Path == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.held[ev.Path]
	if n == nil {
		return
	}
	n.armSeq++
	n.armed = false
	if ev.Type == zk.EventNodeDeleted {
		n.gone = true
	}
}
