package zookeeper

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/internal/mutation"
)

// errSessionLost ends a wait whose session expired or stayed disconnected
// past the grace: the queue entry may be gone, and a lock granted on it
// would be lost at once.
var errSessionLost = errors.New("zookeeper: session lost (expired, or disconnected past the grace)")

// epoch is one session as the backend sees it. Its lost context is the
// Grant.Lost of every lock taken in that session.
type epoch struct {
	id      int64           // session id; 0 until known
	prev    int64           // the expired session this one replaces, if any
	lost    context.Context // Grant.Lost of its locks
	endLost context.CancelFunc
	closed  bool
	expired bool // closed by the session's end, not by the grace
}

func newEpoch(id, prev int64) *epoch {
	ep := &epoch{id: id, prev: prev}
	ep.lost, ep.endLost = context.WithCancel(context.Background())
	return ep
}

// sessionState maps the session's events to the leases: expiry, a
// connection down for longer than the grace, or (with Dial) a server
// unheard from for the silence bound closes the current epoch.
type sessionState struct {
	b       *backend
	mu      sync.Mutex
	cur     *epoch
	down    bool          // the connection is down and the grace timer runs
	timer   *time.Timer   // the grace timer
	silence *time.Timer   // the silence timer (Dial only): see link
	granted time.Duration // the link's granted() when last looked at
	latest  time.Duration // the link's latestGrant() when last looked at
	// held maps the path of every granted znode to its node: the
	// grace hands them to the janitor, and watch events (refresh.go)
	// find them by path.
	held map[string]*node
	// conns counts the connections that got a session (StateHasSession)
	// and expiries: a watch verified on one connection is trusted only
	// while conns stays the same (refresh.go).
	conns   uint64
	stopped bool
}

func (s *sessionState) init(b *backend) {
	s.b = b
	s.cur = newEpoch(0, 0)
	s.held = make(map[string]*node)
}

// onEvent is the zk event callback. It runs on go-zookeeper's goroutines,
// sometimes under its locks: it must not block or call into the *zk.Conn
// beyond its atomic getters.
func (b *backend) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		b.sess.nodeEvent(ev)
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		b.firstOnce.Do(func() { close(b.firstSession) })
		b.sess.connected(b.sessionID())
		b.janitor.kick()
	case zk.StateExpired:
		b.sess.expired()
		b.janitor.kick()
	case zk.StateDisconnected, zk.StateConnecting:
		b.sess.disconnected()
	}
}

// drain feeds the event channel a caller passed with WithEvents to onEvent.
func (b *backend) drain(ch <-chan zk.Event) {
	defer b.wg.Done()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			b.onEvent(ev)
		case <-b.quit:
			return
		}
	}
}

func (b *backend) sessionID() int64 {
	if c := b.conn.Load(); c != nil {
		return c.SessionID()
	}
	return 0
}

func (s *sessionState) connected(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns++
	s.down = false
	if s.timer != nil {
		s.timer.Stop()
	}
	s.watchSilence()
	switch {
	case s.cur.closed:
		// Lost by the grace, or expired: start afresh (same id if the
		// session survived the outage).
		s.cur = newEpoch(id, s.cur.prev)
	case id != 0 && s.cur.id != 0 && id != s.cur.id:
		// A new session without an expiry event: the old one is gone.
		s.end(s.cur, false)
		s.cur = newEpoch(id, s.cur.id)
	case s.cur.id == 0:
		s.cur.id = id
	}
}

func (s *sessionState) expired() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns++
	if s.timer != nil {
		s.timer.Stop()
	}
	s.end(s.cur, false)
	s.cur = newEpoch(0, s.cur.id)
}

func (s *sessionState) disconnected() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.down {
		return
	}
	s.down = true
	ep := s.cur
	grace := s.b.disconnectGrace()
	if grace <= 0 {
		s.end(ep, true)
		return
	}
	// The silence timer, not this one, bounds a silent link: go-zookeeper
	// notices one only two thirds of the session timeout after the server
	// last spoke, and later still if a write hangs.
	s.timer = time.AfterFunc(grace, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.down && s.cur == ep && !s.stopped {
			s.end(ep, true)
		}
	})
}

// watchSilence (re)arms the silence timer at a new session or connection,
// and notes a change of the granted timeout. Without a link (New, or a
// dialer of the caller's) it does nothing.
func (s *sessionState) watchSilence() {
	l := s.b.link
	if l == nil || l.granted() == 0 || s.stopped {
		return
	}
	if g, last := l.granted(), l.latestGrant(); g != s.granted || last != s.latest {
		switch {
		case last > g:
			s.b.log(slog.LevelWarn, "the server granted this connection a longer session timeout than it granted the session before; a restarted server restores the session with the one granted at its creation, so the loss notice follows the shortest",
				"asked", s.b.timeout, "granted", last, "shortest", g)
		case g != s.b.timeout:
			s.b.log(slog.LevelWarn, "the server granted a session timeout other than the one asked for; the loss notice follows the granted one",
				"asked", s.b.timeout, "granted", g)
		}
		s.granted, s.latest = g, last
	}
	if s.silence == nil {
		s.silence = time.AfterFunc(l.silenceLeft(), s.silent)
	} else {
		s.silence.Reset(l.silenceLeft())
	}
}

// silent runs when the server may have gone unheard from for the silence
// bound. The timer is lazy: each reply only moves the link's clock, and the
// timer, on firing, sleeps again until the bound counted from the newest
// reply. Once the bound has passed, the leases are reported lost and the
// connection dropped; the next connection re-arms the timer.
func (s *sessionState) silent() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	l := s.b.link
	if left := l.silenceLeft() + mutation.Dur("zk-requested-timeout", silenceBound(s.b.timeout)-silenceBound(l.granted())); left > 0 { // mutation: zk-requested-timeout
		s.silence.Reset(left)
		return
	}
	s.b.log(slog.LevelDebug, "no answer from the server for two thirds of the session timeout; dropping the connection",
		"granted", l.granted())
	s.end(s.cur, true)
	l.drop()
}

// end closes an epoch's leases. A lease lost by the grace may still exist
// on the server (the session may survive): the janitor deletes it once the
// connection is back. An expired session's znodes are gone already.
func (s *sessionState) end(ep *epoch, maybeAlive bool) {
	if ep.closed {
		return
	}
	ep.closed, ep.expired = true, !maybeAlive
	ep.endLost()
	for path, n := range s.held {
		if n.epoch != ep {
			continue
		}
		delete(s.held, path)
		if maybeAlive {
			s.b.janitor.add(orphan{dir: n.dir, owner: n.owner, session: n.session})
		}
	}
	if maybeAlive {
		s.b.log(slog.LevelWarn, "connection down past the disconnect grace, or the server silent too long; leases reported lost",
			"grace", s.b.disconnectGrace())
	} else {
		s.b.log(slog.LevelWarn, "session expired; leases lost", "session", ep.id)
	}
}

// epochFor returns the live epoch of session sid, or nil if sid is not the
// current session or the session is considered lost.
func (s *sessionState) epochFor(sid int64) *epoch {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.id == 0 && !s.cur.closed && sid != s.cur.prev {
		s.cur.id = sid // without events, the first znode tells the session
	}
	if s.cur.id != sid && sid == s.b.sessionID() && sid != 0 {
		// Without events a new session shows up here first.
		s.end(s.cur, false)
		s.cur = newEpoch(sid, s.cur.id)
	}
	if s.cur.id == sid && !s.cur.closed {
		return s.cur
	}
	return nil
}

// hold records a granted znode so that a loss by the grace can hand it to
// the janitor; false if its epoch has ended meanwhile.
func (s *sessionState) hold(n *node) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.epoch.closed {
		return false
	}
	if old := s.held[n.path]; old != nil {
		// Its path was reused (a raw driver user's owner id, in a key
		// directory reaped and recreated): a path exists once, so the
		// old znode is gone.
		old.gone = true
	}
	s.held[n.path] = n
	return true
}

// ended reports whether n's epoch has ended, and whether by the session's
// end (the znode is gone) rather than the grace (it may live on).
func (s *sessionState) ended(n *node) (closed, expired bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return n.epoch.closed, n.epoch.expired
}

func (s *sessionState) forget(n *node) {
	s.mu.Lock()
	s.forgetLocked(n)
	s.mu.Unlock()
}

func (s *sessionState) forgetLocked(n *node) {
	if s.held[n.path] == n {
		delete(s.held, n.path)
	}
}

func (s *sessionState) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.silence != nil {
		s.silence.Stop()
	}
}

// orphan is a znode nobody waits for any more: a cancelled waiter's entry
// that could not be deleted, a create whose reply was lost, a lease lost by
// the grace. It is found by its owner id in the key directory. With
// emptyDir it is the key directory itself, deleted only if it is empty.
type orphan struct {
	dir, owner string
	session    int64 // the session that owns it; 0 if not known
	emptyDir   bool
}

// janitor deletes orphans, retrying when the connection comes back. It is
// cleanup of the backend's own znodes, not renewal: without it a znode whose
// delete failed would block the key until the session ends.
type janitor struct {
	b    *backend
	mu   sync.Mutex
	todo map[orphan]struct{}
	wake chan struct{}
	// creating counts the creates awaiting their reply: one whose caller
	// gave up on it adds its znode to todo when the reply comes, so Close
	// waits for them (settle) before its last pass.
	creating int
	settled  chan struct{} // a create ended (buffered: one signal is enough)
}

func (j *janitor) init(b *backend) {
	j.b = b
	j.todo = make(map[orphan]struct{})
	j.wake = make(chan struct{}, 1)
	j.settled = make(chan struct{}, 1)
}

// createStarted and createEnded bracket a create's goroutine.
func (j *janitor) createStarted() {
	j.mu.Lock()
	j.creating++
	j.mu.Unlock()
}

func (j *janitor) createEnded() {
	j.mu.Lock()
	j.creating--
	j.mu.Unlock()
	select {
	case j.settled <- struct{}{}:
	default:
	}
}

// settle waits until no create is in flight, or ctx ends.
func (j *janitor) settle(ctx context.Context) {
	for {
		j.mu.Lock()
		n := j.creating
		j.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-j.settled:
		case <-ctx.Done():
			return
		}
	}
}

func (j *janitor) add(o orphan) {
	j.mu.Lock()
	j.todo[o] = struct{}{}
	j.mu.Unlock()
	j.kick()
}

func (j *janitor) kick() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

func (j *janitor) pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.todo)
}

func (j *janitor) run() {
	defer j.b.wg.Done()
	const minRetry, maxRetry = 100 * time.Millisecond, 5 * time.Second
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	delay := minRetry
	for {
		select {
		case <-j.b.quit:
			return
		case <-j.wake:
		case <-retry.C:
		}
		pctx, pcancel := context.WithTimeout(j.b.life, j.b.cleanupTimeout())
		left := j.pass(pctx)
		pcancel()
		if left == 0 {
			delay = minRetry
			continue
		}
		retry.Reset(delay)
		delay = min(2*delay, maxRetry)
	}
}

// pass tries every orphan once and returns how many are left.
func (j *janitor) pass(ctx context.Context) int {
	j.mu.Lock()
	todo := make([]orphan, 0, len(j.todo))
	for o := range j.todo {
		todo = append(todo, o)
	}
	j.mu.Unlock()
	conn := j.b.conn.Load()
	for _, o := range todo {
		if ctx.Err() != nil {
			break
		}
		if j.clean(ctx, conn, o) {
			j.mu.Lock()
			delete(j.todo, o)
			j.mu.Unlock()
		}
	}
	return j.pending()
}

// clean deletes o's znodes and reports whether none is left.
func (j *janitor) clean(ctx context.Context, conn *zk.Conn, o orphan) bool {
	if o.emptyDir {
		return j.dropDir(ctx, conn, o.dir)
	}
	if o.session != 0 && o.session != conn.SessionID() {
		return true // its session ended, and its ephemeral znodes with it
	}
	children, err := call(j.b, ctx, func() ([]string, error) {
		c, _, err := conn.Children(o.dir)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return true
	}
	if err != nil {
		return false
	}
	done := true
	for _, name := range children {
		if owner, _, ok := parseName(name); !ok || owner != escapeOwner(o.owner) {
			continue
		}
		_, err := call(j.b, ctx, func() (struct{}, error) { return struct{}{}, conn.Delete(o.dir+"/"+name, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			j.b.log(slog.LevelDebug, "deleting an orphaned lock znode failed; will retry", "path", o.dir+"/"+name, "error", err)
			done = false
		}
	}
	return done
}

// dropDir deletes the key directory dir if it is empty, and reports
// whether that is settled. Any client may delete an empty key directory:
// one about to create a lock znode there gets ErrNoNode and makes the
// directory again. Only a delete lost with the connection is tried again;
// one refused (ErrNoAuth) would be refused again.
func (j *janitor) dropDir(ctx context.Context, conn *zk.Conn, dir string) bool {
	_, err := call(j.b, ctx, func() (struct{}, error) { return struct{}{}, conn.Delete(dir, -1) })
	return err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNotEmpty) || errors.Is(err, zk.ErrNoAuth)
}

// call runs f, a blocking go-zookeeper call, until it returns or ctx ends.
// go-zookeeper calls take no context; an abandoned call finishes in its own
// goroutine, since the client answers or fails every request within about a
// session timeout, and at once after Close.
func call[T any](b *backend, ctx context.Context, f func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
