package etcd

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/internal/clock"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// restartMin and restartMax bound the pause before the loss watch's
	// session is made again after it broke (doubling while it keeps
	// failing).
	restartMin = 50 * time.Millisecond
	restartMax = time.Second
	// checkChunk is how many keys one check transaction reads (etcd's
	// default --max-txn-ops is 128).
	checkChunk = 128
	// checkTimeout bounds one check transaction.
	checkTimeout = 5 * time.Second
	// progressEvery is how often the session asks its member for a
	// progress notice; a session that heard nothing for silentAfter is made
	// again (on another connection, if the client's balancer has one). A
	// member that hangs with its connection open would otherwise keep every
	// loss notice back until it came back.
	progressEvery = time.Second
	silentAfter   = 3 * time.Second
	// maxCatchUp is the most revisions a resumed watch may have to replay:
	// etcd replays about 10,000 a second and sends nothing (not even
	// progress) meanwhile, so a longer replay would outlast silentAfter
	// again and again. Past it the watch is made afresh and its keys read.
	maxCatchUp = 5000
	// lingerFor is how long a queue stays watched after the Locker's last
	// lock or attempt on it ended: a key locked again and again then costs
	// no watch of its own per lock.
	lingerFor = 5 * time.Second
	// maxIdle bounds the queues watched with no lock of the Locker on them;
	// past it the longest idle go first.
	maxIdle = 64
)

// watcher is the backend's loss watch: one etcd watch (deletions only) per
// queue prefix/K/ on which the Locker has a lock or an attempt, or had one
// within lingerFor, that hands each deletion to the handle of that key, if
// it has one; other Lockers' locks on other keys cost it nothing. Its
// watches share one gRPC stream, a session, made again when it breaks. A
// handle is registered, and its queue's watch asked for, before its key is
// created.
//
// It misses nothing: while a queue's watch is covered, it (or its
// successor, made again from the revision after the last one it handed
// over) hears every revision after from, so a lock whose key was created
// after from is covered. Any other lock (its key created before its queue's
// watch, or the watch compacted away or not up yet) is unsure: once the
// watch covers it, a read of its key settles whether it was deleted in the
// gap.
type watcher struct {
	b *backend
	// beforeWatch, if set (by tests), runs before each session is made.
	beforeWatch func()
	// open opens a session's stream; whole: its watches cannot be told
	// apart by queue, so one watch of the whole prefix serves every lock.
	open  func(ctx context.Context) (lossStream, error)
	whole bool

	// mu guards the fields below, the queue watches and the session's;
	// a handle's own mu is taken inside it.
	mu      sync.Mutex
	started bool
	closed  bool
	queues  map[string]*queueWatch
	sess    *session           // the session running, if any
	cancel  context.CancelFunc // ends the current session (tests break it)
}

// session is one stream and the queue watches on it.
type session struct {
	ctx    context.Context
	cancel context.CancelFunc
	st     lossStream
	wake   chan struct{} // something to send, or to check
	up     atomic.Bool   // a watch of it was confirmed

	// Under watcher.mu:
	nextID  int64
	byID    map[int64]*queueWatch
	creates []*queueWatch // watches to ask for
	cancels []int64       // watches to end
}

// queueWatch is the loss watch of one queue; watcher.mu guards it.
type queueWatch struct {
	q       string
	keys    map[string]*handle
	unsure  map[string]*handle // to read once covered
	covered bool               // the watch hears every revision after from, or will
	from    int64
	seen    int64     // every deletion up to seen was handed over
	idle    time.Time // since when no handle is registered; zero while some are
	id      int64     // its watch in the current session; 0 if none
	afresh  bool      // that watch was asked from the current revision
}

// scope is the queue whose watch reports h's deletion.
func (w *watcher) scope(h *handle) string {
	if w.whole {
		return w.b.prefix + "/"
	}
	return h.q
}

// add registers h, whose key is about to be created, and makes sure its
// queue is watched; false if the backend is closing (then nothing reports
// h's loss).
func (w *watcher) add(h *handle) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	if !w.started {
		w.started = true
		w.b.wg.Add(1)
		go w.run()
	}
	q := w.scope(h)
	qw := w.queues[q]
	if qw == nil {
		qw = &queueWatch{q: q, keys: map[string]*handle{}, unsure: map[string]*handle{}}
		w.queues[q] = qw
	}
	qw.keys[h.key] = h
	qw.idle = time.Time{}
	h.qw = qw
	if w.sess != nil && qw.id == 0 {
		w.sess.watchLocked(qw)
	}
	return true
}

// granted settles whether the watch of h's queue covers h, just granted;
// if not, h's key is read once it does.
func (w *watcher) granted(h *handle) {
	w.mu.Lock()
	defer w.mu.Unlock()
	qw := h.qw
	if qw.keys[h.key] != h || (qw.covered && h.rev > qw.from) {
		return
	}
	qw.unsure[h.key] = h
	if qw.covered && w.sess != nil {
		w.sess.poke()
	}
}

// remove unregisters h (released, or its attempt failed).
func (w *watcher) remove(h *handle) {
	w.mu.Lock()
	defer w.mu.Unlock()
	qw := h.qw
	if qw.keys[h.key] != h {
		return
	}
	delete(qw.keys, h.key)
	delete(qw.unsure, h.key)
	if len(qw.keys) == 0 {
		qw.idle = time.Now()
	}
}

// close stops new registrations; the caller then ends b.life and waits.
func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// run is the loss watch's goroutine: it makes the session, and makes it
// again whenever it breaks, until the backend closes.
func (w *watcher) run() {
	defer w.b.wg.Done()
	pause := restartMin
	for {
		if w.beforeWatch != nil {
			w.beforeWatch()
		}
		if w.session() {
			pause = restartMin
		}
		if w.b.life.Err() != nil {
			return
		}
		if clock.Sleep(w.b.life, pause) != nil {
			return
		}
		pause = min(2*pause, restartMax)
	}
}

// session runs one session until it breaks; true if a watch of it was up.
// Its stream sends what the session asks for and checks the unsure locks;
// a goroutine of its own receives, and a timer ends the session once it
// has heard nothing for silentAfter while it watches something.
func (w *watcher) session() (up bool) {
	// WithRequireLeader: a member cut off from the leader ends the stream
	// instead of leaving it silent; the session is then made again,
	// elsewhere.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.b.life))
	defer cancel()
	st, err := w.open(ctx)
	if err != nil {
		return false
	}
	s := &session{ctx: ctx, cancel: cancel, st: st, wake: make(chan struct{}, 1), byID: map[int64]*queueWatch{}}
	w.mu.Lock()
	w.sess, w.cancel = s, cancel
	for _, qw := range w.queues {
		s.watchLocked(qw)
	}
	w.mu.Unlock()
	silent := time.AfterFunc(silentAfter, cancel)
	defer silent.Stop()
	received := make(chan struct{})
	go func() {
		defer close(received)
		w.receive(s, silent)
	}()

	w.serve(s, silent)

	w.mu.Lock()
	w.sess = nil
	for _, qw := range w.queues {
		qw.id = 0
	}
	w.mu.Unlock()
	cancel()
	st.close()
	<-received
	return s.up.Load()
}

// serve sends what s asks for, checks unsure locks, asks for a progress
// notice every progressEvery (it reaches every watch of the stream) and
// ends idle watches, until s ends.
func (w *watcher) serve(s *session, silent *time.Timer) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		if w.flush(s) != nil || w.checkAll(s) != nil {
			s.cancel() // made again, each watch from its seen+1
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
			if !w.sweep(s) {
				silent.Reset(silentAfter) // nothing watched: nothing to hear
				continue
			}
			if s.st.progress() != nil {
				s.cancel()
				return
			}
		}
	}
}

// watchLocked asks for a watch of qw in s.
func (s *session) watchLocked(qw *queueWatch) {
	s.nextID++
	qw.id = s.nextID
	s.byID[qw.id] = qw
	s.creates = append(s.creates, qw)
	s.poke()
}

// poke wakes the session's sender.
func (s *session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// flush sends the watch requests and cancels s has pending.
func (w *watcher) flush(s *session) error {
	type create struct {
		id    int64
		q     string
		start int64
	}
	w.mu.Lock()
	var creates []create
	for _, qw := range s.creates {
		if s.byID[qw.id] != qw {
			continue // dropped meanwhile
		}
		c := create{id: qw.id, q: qw.q}
		if qw.covered {
			c.start = qw.seen + 1
		}
		qw.afresh = !qw.covered
		creates = append(creates, c)
	}
	cancels := s.cancels
	s.creates, s.cancels = nil, nil
	w.mu.Unlock()
	for _, c := range creates {
		if err := s.st.create(c.id, c.q, c.start); err != nil {
			return err
		}
	}
	for _, id := range cancels {
		if err := s.st.cancel(id); err != nil {
			return err
		}
	}
	return nil
}

// receive hands each response of s's stream over, until the stream breaks
// or a response ends the session.
func (w *watcher) receive(s *session, silent *time.Timer) {
	defer s.cancel()
	for {
		resp, err := s.st.recv()
		if err != nil {
			return
		}
		silent.Reset(silentAfter)
		if w.response(s, resp) != nil {
			return
		}
	}
}

// response handles one response: a watch confirmed (afresh: it covers
// what comes after its header), compacted (made again afresh, its locks
// unsure), a progress notice, or deletions to hand over. A watch refused or
// ended by the server ends the session.
func (w *watcher) response(s *session, resp *pb.WatchResponse) error {
	if resp.Created {
		s.up.Store(true)
	}
	rev := resp.GetHeader().GetRevision()
	if resp.WatchId == clientv3.InvalidWatchID {
		if resp.Canceled {
			return fmt.Errorf("etcd: loss watch refused: %s", resp.CancelReason)
		}
		w.progress(s, rev)
		return nil
	}
	w.mu.Lock()
	qw := s.byID[resp.WatchId]
	w.mu.Unlock()
	switch {
	case qw == nil: // ended meanwhile
	case resp.CompactRevision != 0:
		w.lostTrack(s, qw, resp.WatchId)
	case resp.Canceled:
		return fmt.Errorf("etcd: loss watch of %q ended: %s", qw.q, resp.CancelReason)
	case resp.Created:
		w.mu.Lock()
		behind := !qw.afresh && rev-qw.seen > maxCatchUp
		if qw.afresh {
			qw.covered, qw.from, qw.seen = true, rev, rev
		}
		if behind {
			s.cancels = append(s.cancels, resp.WatchId)
		}
		w.mu.Unlock()
		if behind {
			w.lostTrack(s, qw, resp.WatchId)
			return nil
		}
		s.poke() // check its unsure locks
	default:
		w.deletions(qw, resp)
	}
	return nil
}

// deletions hands the deletions of resp over to their handles.
func (w *watcher) deletions(qw *queueWatch, resp *pb.WatchResponse) {
	last := resp.GetHeader().GetRevision() // a progress notice
	for _, ev := range resp.Events {
		last = ev.Kv.ModRevision
		if ev.Type != mvccpb.DELETE {
			continue
		}
		w.mu.Lock()
		h := qw.keys[string(ev.Kv.Key)]
		w.mu.Unlock()
		if h != nil {
			h.deleted(ev.Kv.ModRevision)
		}
	}
	w.mu.Lock()
	qw.seen = max(qw.seen, last)
	w.mu.Unlock()
}

// progress records a progress notice of the stream: every watch of s has
// handed over everything up to rev.
func (w *watcher) progress(s *session, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, qw := range s.byID {
		qw.seen = max(qw.seen, rev)
	}
}

// lostTrack marks every handle of qw unsure after a gap in its watch
// (watch id, which the server has ended or is told to end), and asks for
// it again afresh.
func (w *watcher) lostTrack(s *session, qw *queueWatch, id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(s.byID, id)
	qw.covered, qw.from, qw.seen = false, 0, 0
	for k, h := range qw.keys {
		qw.unsure[k] = h
	}
	if qw.id == id {
		s.watchLocked(qw)
	}
}

// sweep ends the watches of the queues idle for lingerFor, and of the
// longest idle past maxIdle; it reports whether s still watches anything.
func (w *watcher) sweep(s *session) (watching bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	var idle []*queueWatch
	for _, qw := range w.queues {
		switch {
		case qw.idle.IsZero():
		case now.Sub(qw.idle) >= lingerFor:
			w.dropLocked(s, qw)
		default:
			idle = append(idle, qw)
		}
	}
	if len(idle) > maxIdle {
		slices.SortFunc(idle, func(a, b *queueWatch) int { return a.idle.Compare(b.idle) })
		for _, qw := range idle[:len(idle)-maxIdle] {
			w.dropLocked(s, qw)
		}
	}
	return len(s.byID) > 0
}

// dropLocked forgets the idle queue qw and ends its watch.
func (w *watcher) dropLocked(s *session, qw *queueWatch) {
	if qw.id != 0 {
		delete(s.byID, qw.id)
		s.cancels = append(s.cancels, qw.id)
	}
	delete(w.queues, qw.q)
}

// checkAll reads the unsure keys of every covered queue of s.
func (w *watcher) checkAll(s *session) error {
	w.mu.Lock()
	var qws []*queueWatch
	for _, qw := range w.queues {
		if qw.covered && len(qw.unsure) > 0 {
			qws = append(qws, qw)
		}
	}
	w.mu.Unlock()
	for _, qw := range qws {
		if err := w.check(s.ctx, qw); err != nil {
			return err
		}
	}
	return nil
}

// check reads the unsure keys of qw while it is covered (so that a
// deletion after the read is heard, and the read is at a revision at or
// after from): a key absent at the read's revision was deleted if it had
// been created by then; one created later is covered.
func (w *watcher) check(ctx context.Context, qw *queueWatch) error {
	for {
		w.mu.Lock()
		var hs []*handle
		if qw.covered {
			for _, h := range qw.unsure {
				hs = append(hs, h)
				if len(hs) == checkChunk {
					break
				}
			}
		}
		w.mu.Unlock()
		if len(hs) == 0 {
			return nil
		}
		ops := make([]clientv3.Op, len(hs))
		for i, h := range hs {
			ops[i] = clientv3.OpGet(h.key, clientv3.WithKeysOnly())
		}
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		resp, err := w.b.cli.Txn(cctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return err
		}
		at := resp.Header.Revision
		for i, h := range hs {
			var created int64
			if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
				created = kvs[0].CreateRevision
			}
			h.read(at, created)
		}
		w.mu.Lock()
		for _, h := range hs {
			if qw.unsure[h.key] == h {
				delete(qw.unsure, h.key)
			}
		}
		w.mu.Unlock()
	}
}

// deleted records the watch's report that h's key was deleted at rev.
func (h *handle) deleted(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deletedAt = max(h.deletedAt, rev)
	h.reportLocked()
}

// read records a check: at revision at, the key had CreateRevision created
// (0: it did not exist).
func (h *handle) read(at, created int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if created == 0 || (h.rev != 0 && created != h.rev) {
		h.missingAt = max(h.missingAt, at)
	}
	h.reportLocked()
}

// goneLocked: the key is known deleted since it was created. Before the
// create's reply (rev 0) nothing is known; a report older than the create
// is of an earlier attempt's key.
func (h *handle) goneLocked() bool {
	return h.rev != 0 && (h.deletedAt > h.rev || h.missingAt >= h.rev)
}

// reportLocked closes Lost if the held lock is known gone.
func (h *handle) reportLocked() {
	if h.state == held && h.goneLocked() {
		h.shutLost()
	}
}
