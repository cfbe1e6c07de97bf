package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// node is a lock znode this backend created; it is the Grant's Handle.
type node struct {
	dir, path, name string
	owner           string
	seq             int64
	czxid           int64
	version         int32
	session         int64
	epoch           *epoch

	// What the watch on the znode tells (refresh.go); guarded by the
	// session state's mu.
	gone    bool   // a check or a NodeDeleted event found it gone
	armed   bool   // a data watch on it is set, as far as the events tell
	armSeq  uint64 // counts the events on its path
	checked uint64 // sessionState.conns when last seen to exist, watched; 0: never
}

// Node describes the znode behind a lease. Reach it with Lease.As:
//
//	var n zookeeper.Node
//	if lease.As(&n) { ... n.Path ... }
type Node struct {
	Path      string // the lock znode
	Czxid     int64  // the zxid of its creation: the lease's token
	SessionID int64  // the session that owns it
}

// As fills a *Node.
func (n *node) As(target any) bool {
	if p, ok := target.(*Node); ok {
		*p = Node{Path: n.path, Czxid: n.czxid, SessionID: n.session}
		return true
	}
	return false
}

// TryLock joins the key's queue and, unless it is first, leaves it again at
// once: nothing stays behind when the key is held.
func (b *backend) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return b.acquire(ctx, req, false)
}

// Lock joins the key's queue and waits, watching only its predecessor,
// until it is first or ctx ends; then it deletes its znode before returning.
func (b *backend) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return b.acquire(ctx, req, true)
}

func (b *backend) acquire(ctx context.Context, req driver.Request, wait bool) (driver.Grant, error) {
	conn := b.conn.Load()
	dir := b.base + "/" + escapeKey(req.Key)
	n, stat, err := b.enqueue(ctx, conn, dir, req.Owner, req.Value)
	if err != nil {
		return driver.Grant{}, b.classify(err)
	}
	g, err := b.await(ctx, conn, req.Key, n, stat, wait)
	if err != nil {
		b.dequeue(ctx, conn, n)
		return driver.Grant{}, b.classify(err)
	}
	return g, nil
}

// firstLook is what the create's goroutine learned right after the create:
// the first listing of the key directory and our znode's stat.
type firstLook struct {
	children  []string
	childErr  error
	listStart time.Time
	exists    bool
	czxid     int64
	version   int32
	session   int64
	statErr   error
	// The key directory's ACL, read when the Locker checks its parents
	// (acl.go).
	acl    []zk.ACL
	aclErr error
}

// enqueue creates our znode, with the holder's value as its data (Inspect
// reads it; none without a value); if the key directory is missing (first
// use, or reaped by the server while empty) it creates it as a container
// and tries again.
func (b *backend) enqueue(ctx context.Context, conn *zk.Conn, dir, owner, value string) (*node, *firstLook, error) {
	prefix := dir + "/lock-" + escapeOwner(owner) + "-"
	var data []byte // nil, as before values existed, when there is none
	if value != "" {
		data = []byte(value)
	}
	// The server reaps only the containers that have had a child, so a key
	// directory this call created (or may have) and then put no lock znode
	// in would stay for good: the janitor deletes it if it is empty.
	made := false
	fail := func(err error) (*node, *firstLook, error) {
		if made {
			b.janitor.add(orphan{dir: dir, emptyDir: true})
		}
		return nil, nil, err
	}
	for attempt := 0; ; attempt++ {
		path, look, err := b.create(ctx, conn, dir, owner, prefix, data)
		if err == nil {
			name := path[len(dir)+1:]
			_, seq, ok := parseName(name)
			if !ok {
				b.dequeue(ctx, conn, &node{dir: dir, path: path, owner: owner})
				return nil, nil, fmt.Errorf("zookeeper: unexpected znode name %q", path)
			}
			return &node{dir: dir, path: path, name: name, owner: owner, seq: seq}, look, nil
		}
		if !errors.Is(err, zk.ErrNoNode) || attempt == 2 {
			return fail(fmt.Errorf("zookeeper: create lock znode under %s: %w", dir, err))
		}
		created, err := b.ensureDir(ctx, conn, dir)
		made = made || created || err != nil && !definitelyNotCreated(err)
		if err != nil {
			return fail(err)
		}
		if created && b.afterDir != nil {
			b.afterDir()
		}
	}
}

// create makes our EPHEMERAL|SEQUENTIAL znode and lists the directory, both
// in one goroutine (go-zookeeper calls take no ctx; one hand-off per
// acquire, not one per call). If ctx ends first the znode may exist: the
// goroutine hands it to the janitor, which finds it by our owner id; Close
// waits for that hand-off (janitor.settle).
func (b *backend) create(ctx context.Context, conn *zk.Conn, dir, owner, prefix string, data []byte) (string, *firstLook, error) {
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	type result struct {
		path string
		look *firstLook
		err  error
	}
	var (
		mu     sync.Mutex
		gaveUp bool
		ch     = make(chan result, 1)
	)
	abandoned := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return gaveUp
	}
	b.janitor.createStarted()
	go func() {
		defer b.janitor.createEnded() // after the hand-off below
		p, err := conn.Create(prefix, data, zk.FlagEphemeral|zk.FlagSequence, b.acl)
		var look *firstLook
		if err == nil && !abandoned() {
			look = b.look(conn, dir, p)
		}
		mu.Lock()
		gone := gaveUp
		if !gone {
			ch <- result{p, look, err}
		}
		mu.Unlock()
		if gone && (err == nil || !definitelyNotCreated(err)) {
			b.janitor.add(orphan{dir: dir, owner: owner})
		}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		mu.Lock()
		select {
		case r = <-ch: // it just arrived: handle it as below
			mu.Unlock()
		default:
			gaveUp = true
			mu.Unlock()
			return "", nil, ctx.Err()
		}
	}
	if r.err != nil {
		if !definitelyNotCreated(r.err) {
			b.janitor.add(orphan{dir: dir, owner: owner})
		}
		return "", nil, r.err
	}
	return r.path, r.look, nil // await checks ctx before using look
}

// look lists dir and stats our znode with the two requests sent back to
// back (one round trip; a session's requests are answered in order, so both
// see our znode), and reads dir's ACL in the same round trip when the
// Locker checks its parents. The Children call runs here, in the create's
// goroutine; the others need a goroutine each.
func (b *backend) look(conn *zk.Conn, dir, path string) *firstLook {
	res := &firstLook{listStart: time.Now()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var st *zk.Stat
		res.exists, st, res.statErr = conn.Exists(path)
		if res.statErr == nil && res.exists {
			res.czxid, res.version, res.session = st.Czxid, st.Version, st.EphemeralOwner
		}
	}()
	if b.checkACL {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.acl, _, res.aclErr = conn.GetACL(dir)
		}()
	}
	res.children, _, res.childErr = conn.Children(dir)
	wg.Wait() // go-zookeeper answers or fails every call, at once after Close
	return res
}

// await waits until our znode is the lowest in the directory (or, for a
// try, checks once).
func (b *backend) await(ctx context.Context, conn *zk.Conn, key string, n *node, look *firstLook, wait bool) (driver.Grant, error) {
	if err := b.adopt(ctx, n, look); err != nil {
		return driver.Grant{}, err
	}
	children, start, err := look.children, look.listStart, look.childErr
	for {
		if err != nil {
			if errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrNoNode) {
				// Our znode went with its session (and then its directory):
				// a new attempt may try again.
				err = fmt.Errorf("%w: %w", errSessionLost, err)
			}
			return driver.Grant{}, fmt.Errorf("zookeeper: list %s: %w", n.dir, err)
		}
		found, pred := position(children, n)
		if !found {
			return driver.Grant{}, fmt.Errorf("zookeeper: %s is gone: %w", n.path, errSessionLost)
		}
		if pred == "" {
			return b.granted(n, start)
		}
		if !wait {
			return driver.Grant{}, &distlock.HeldError{Key: key}
		}
		if err := b.awaitPred(ctx, conn, n, pred); err != nil {
			return driver.Grant{}, err
		}
		start = time.Now()
		children, err = call(b, ctx, func() ([]string, error) {
			c, _, err := conn.Children(n.dir)
			return c, err
		})
		if err != nil && ctx.Err() != nil {
			return driver.Grant{}, ctx.Err()
		}
	}
}

// adopt takes what the create's goroutine saw into n, once ctx and that look
// pass: our znode's identity and stat, and the session epoch it belongs to,
// which must still be current (a lock granted in an ended session would be
// lost at once).
func (b *backend) adopt(ctx context.Context, n *node, look *firstLook) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.checkLook(n, look); err != nil {
		return err
	}
	n.czxid, n.version, n.session = look.czxid, look.version, look.session
	n.epoch = b.sess.epochFor(n.session)
	if n.epoch == nil {
		return fmt.Errorf("zookeeper: %s belongs to session %#x: %w", n.path, n.session, errSessionLost)
	}
	return nil
}

// granted makes the grant of n, lowest in its directory as of start, once
// the session records it as held, so that a loss by the grace hands it to
// the janitor; it fails if n's epoch has ended meanwhile.
func (b *backend) granted(n *node, start time.Time) (driver.Grant, error) {
	if !b.sess.hold(n) {
		return driver.Grant{}, errSessionLost
	}
	return driver.Grant{Token: n.czxid, Start: start, Lost: n.epoch.lost, Handle: n}, nil
}

// awaitPred sets a watch on pred, our predecessor, and waits for it to
// fire, for ctx to end or for the session to be lost. It returns nil once
// the watch fires without error, or at once if pred is already gone: the
// caller then lists the directory again to learn its new place.
func (b *backend) awaitPred(ctx context.Context, conn *zk.Conn, n *node, pred string) error {
	type watch struct {
		exists bool
		ch     <-chan zk.Event
	}
	w, err := call(b, ctx, func() (watch, error) {
		ok, _, ch, err := conn.ExistsW(n.dir + "/" + pred)
		return watch{ok, ch}, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("zookeeper: watch %s/%s: %w", n.dir, pred, err)
	}
	if !w.exists {
		return nil
	}
	select {
	case ev := <-w.ch:
		b.watchFires.Add(1)
		if ev.Err != nil {
			return fmt.Errorf("zookeeper: watch on %s/%s: %w", n.dir, pred, ev.Err)
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-n.epoch.lost.Done():
		return errSessionLost
	}
	return nil
}

// checkLook reports what the create's goroutine saw that ends the attempt:
// a key directory open to others (when the Locker checks its parents), a
// failed read, our znode gone.
func (b *backend) checkLook(n *node, look *firstLook) error {
	if b.checkACL {
		if err := b.checkDir(n.dir, look.acl, look.aclErr); err != nil {
			return err
		}
	}
	switch {
	case look.childErr != nil:
		return fmt.Errorf("zookeeper: list %s: %w", n.dir, look.childErr)
	case look.statErr != nil:
		return fmt.Errorf("zookeeper: stat %s: %w", n.path, look.statErr)
	case !look.exists:
		return fmt.Errorf("zookeeper: %s vanished after its create: %w", n.path, errSessionLost)
	}
	return nil
}

// dequeue deletes our znode after a failed or abandoned acquire, within a
// bounded time even if ctx has ended; the janitor takes over if it cannot.
func (b *backend) dequeue(ctx context.Context, conn *zk.Conn, n *node) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cleanupTimeout())
	defer cancel()
	_, err := call(b, dctx, func() (struct{}, error) { return struct{}{}, conn.Delete(n.path, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		b.janitor.add(orphan{dir: n.dir, owner: n.owner, session: n.session})
	}
}

// Unlock deletes our znode, at the version it was created with.
func (b *backend) Unlock(ctx context.Context, g driver.Grant) error {
	n, ok := g.Handle.(*node)
	if !ok && g.Handle == nil && g.Owner != "" {
		// An attempt whose outcome was unknown: acquire has already handed
		// its znode, if any, to the janitor (found by owner), so there is
		// nothing to ask again (an error would keep the give-back asking
		// for the release timeout, one of the Locker's 64 slots each).
		return nil
	}
	if !ok {
		return fmt.Errorf("zookeeper: grant of another backend (%T)", g.Handle)
	}
	conn := b.conn.Load()
	closed, expired := b.sess.ended(n)
	if expired || (conn.SessionID() != 0 && conn.SessionID() != n.session) {
		b.sess.forget(n)
		return fmt.Errorf("%w: session %#x has ended", distlock.ErrNotHeld, n.session)
	}
	_, err := call(b, ctx, func() (struct{}, error) { return struct{}{}, conn.Delete(n.path, n.version) })
	switch {
	case err == nil:
		b.sess.forget(n)
		return nil
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
		b.sess.forget(n)
		return fmt.Errorf("%w: %s: %w", distlock.ErrNotHeld, n.path, err)
	case closed:
		// Given up after the grace: the janitor has it in hand.
		return fmt.Errorf("%w: %s given up after the disconnect grace: %w", distlock.ErrNotHeld, n.path, err)
	default:
		return b.classify(fmt.Errorf("zookeeper: delete %s: %w", n.path, err))
	}
}

// ensureDir creates the key directory as a container znode, and the base
// path and its missing ancestors as persistent ones. It reports whether it
// created the directory (false if it was there already).
func (b *backend) ensureDir(ctx context.Context, conn *zk.Conn, dir string) (bool, error) {
	mk := func() (bool, error) {
		_, err := call(b, ctx, func() (string, error) { return conn.CreateContainer(dir, nil, zk.FlagContainer, b.acl) })
		if errors.Is(err, zk.ErrNodeExists) {
			return false, nil
		}
		return err == nil, err
	}
	created, err := mk()
	if !errors.Is(err, zk.ErrNoNode) {
		if err != nil {
			return false, fmt.Errorf("zookeeper: create key directory %s: %w", dir, err)
		}
		return created, nil
	}
	if err := b.ensureBase(ctx, conn); err != nil {
		return false, err
	}
	created, err = mk()
	if err != nil {
		return false, fmt.Errorf("zookeeper: create key directory %s: %w", dir, err)
	}
	return created, nil
}

// definitelyNotCreated reports whether a create error proves that the znode
// does not exist; any other error leaves it in doubt.
func definitelyNotCreated(err error) bool {
	for _, e := range []error{zk.ErrNoNode, zk.ErrNodeExists, zk.ErrNoAuth, zk.ErrInvalidACL,
		zk.ErrNoChildrenForEphemerals, zk.ErrBadArguments, zk.ErrInvalidFlags, zk.ErrInvalidPath,
		zk.ErrSessionExpired, zk.ErrAuthFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// position finds our znode among the children and its immediate
// predecessor ("" if we are first). Names not of our form are ignored.
func position(children []string, n *node) (found bool, pred string) {
	var predSeq int64
	for _, c := range children {
		if c == n.name {
			found = true
			continue
		}
		_, seq, ok := parseName(c)
		if !ok || seq >= n.seq {
			continue
		}
		if pred == "" || seq > predSeq {
			pred, predSeq = c, seq
		}
	}
	return found, pred
}

// parseName splits "lock-<owner>-<sequence>". ZooKeeper prints the sequence
// as %010d of an int32, so after 2^31 creates in one directory it turns
// negative ("lock-<owner>--2147483648"); the order is then wrong, which
// needs a directory never empty for that long.
func parseName(name string) (owner string, seq int64, ok bool) {
	rest, ok := strings.CutPrefix(name, "lock-")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", 0, false
	}
	ownerEnd, digits := i, rest[i+1:]
	if rest[i-1] == '-' {
		ownerEnd, digits = i-1, "-"+digits
	}
	if ownerEnd == 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return rest[:ownerEnd], seq, true
}

// escapeKey maps a key to one znode name, injectively: bytes other than
// letters, digits, '-', '_' and '.' become %XX, and so do the dots of the
// names "." and "..".
func escapeKey(key string) string {
	s := escape(key, "-_.")
	if s == "." || s == ".." {
		s = strings.ReplaceAll(s, ".", "%2E")
	}
	return s
}

// escapeOwner escapes an owner id for use in a znode name; '-' is escaped
// too, since it separates the owner from the sequence.
func escapeOwner(owner string) string { return escape(owner, "_") }

func escape(s, keep string) string {
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	sb.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(keep, c) >= 0 {
			sb.WriteByte(c)
			continue
		}
		sb.WriteByte('%')
		sb.WriteByte(hex[c>>4])
		sb.WriteByte(hex[c&15])
	}
	return sb.String()
}
