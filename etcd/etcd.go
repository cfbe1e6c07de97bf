// Package etcd is the distlock backend on etcd v3: a revision-ordered queue
// of lease-bound keys, the same recipe as etcd's own concurrency.Mutex, with
// a faster hand-off. It serves "etcd://host:port,host:port/" URLs.
//
// # How a lock works
//
// Each attempt on key K creates prefix/K/<owner> (owner is random per lease)
// bound to an etcd lease, in one transaction that also reads the queue. The
// owner of K is the key with the lowest CreateRevision under prefix/K/; the
// fencing token is that CreateRevision, a cluster-wide revision, so tokens
// strictly increase across holders of K and across restarts and leader
// changes. A waiter watches only its predecessor, from the store's current
// revision, so that etcd delivers the release at once instead of from its
// 100 ms catch-up loop (which serves watches that start in the past); one to
// three re-reads of the queue in the watch's first 60 ms cover the revisions
// between the waiter's read and its watch, and a write that races the
// watch's creation. Waiters acquire in the order their keys were created
// (FIFO). A waiter whose context ends deletes its key.
// TryAcquire creates its key only if nothing (holder or waiter) is queued, so
// it never jumps the queue and leaves nothing behind when K is held.
// Release deletes the key only if its CreateRevision still matches.
//
// # Leases
//
// Every lock has an etcd lease of its own while it is held, so that a lock
// lives exactly as long as the portable layer keeps it refreshed: Refresh
// keeps the lease alive (KeepAliveOnce), and a lock that is not refreshed — or
// whose process crashed — frees on the server when its lease runs out. No
// background keep-alive runs for held locks; a Locker-wide lease kept alive by
// the client would keep a lock its holder stopped refreshing held for as long
// as the process lives. Leases are recycled: a released lock's lease serves
// the next acquire with the same TTL while it still has that TTL left, so an
// uncontended acquire on a warm Locker is one round trip. A waiting Acquire
// keeps its own lease alive while it waits, and the server forgets a waiter
// whose process died within the lease TTL.
//
// etcd lease TTLs are whole seconds and at least the server's minimum (1.5 ×
// the election timeout, rounded up: 2 s with etcd's defaults). A TTL is sent
// to the server rounded up to whole seconds plus one second of headroom (so
// that recycled leases can still promise the full TTL); the server may raise
// it to its minimum. The lease's validity reported to the portable layer
// never exceeds the requested TTL, and is counted from the start of the call
// that last confirmed the lease, so Lease.Expires is honest. A lock acquired
// after a long wait may therefore report a validity somewhat below its TTL
// (never below about two thirds of it); WithAutoRenew or Do renew it anyway.
// The price of the rounding: a crashed holder's lock frees after up to
// ceil(TTL)+1 s (or the server's minimum), not after exactly TTL.
//
// # Guarantees
//
// Mutual exclusion and token order hold as long as etcd's linearizable store
// does: they survive the loss of a minority of members and leader elections
// (a new leader extends leases, never shortens them). Mutual exclusion does
// not depend on clocks; a holder's belief that it still holds the lock
// depends on its clock rate, as with every lease — check tokens at the
// resource. With WithLossWatch (the default) each lock held longer than
// 100 ms watches its own key and Lease.Done closes soon after the key is
// deleted (lease revoked or expired, or key removed by hand).
//
// Not guaranteed: RetryAfter in a failed TryAcquire is not filled in (it
// would cost a round trip); a waiter that cannot delete its key when its
// context ends (server down) leaves it in the queue until its lease expires.
//
// Keys are stored as prefix/escaped-key/owner with "%" and "/" escaped, so
// keys that contain "/" do not nest. Two Lockers share locks when they use the
// same prefix; do not use one prefix inside another.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func init() {
	driver.Register("etcd", open)
}

// DefaultPrefix is the key prefix used when WithPrefix is not given.
const DefaultPrefix = "distlock"

// DefaultDialTimeout bounds how long Open waits for the cluster to answer
// (together with Open's context), unless the URL sets dial_timeout.
const DefaultDialTimeout = 5 * time.Second

const (
	// maxSpares caps the recycled leases kept per TTL; extra ones are left
	// to expire on the server.
	maxSpares = 8
	// spareMargin is how much more than the TTL a recycled lease must have
	// left, so that the round trip using it still gets the full TTL.
	spareMargin = 100 * time.Millisecond
	// cleanupTimeout bounds the deletes made after the caller's context
	// ended (a cancelled waiter removing its key) and Close's revokes.
	cleanupTimeout = time.Second
	// lossWatchDelay is how long a lock is held before its loss watch is
	// made; a deletion in that time is reported once it is.
	lossWatchDelay = 100 * time.Millisecond
	// retryPause separates re-reads of the queue while a waiter's server
	// connection is failing.
	retryPause = 100 * time.Millisecond
)

// syncChecks are when, after its watch is made, a waiter re-reads the queue
// in case etcd left that watch to its 100 ms catch-up loop (see follow): the
// first always, the others only while the store keeps moving.
var syncChecks = []time.Duration{5 * time.Millisecond, 25 * time.Millisecond, 60 * time.Millisecond}

type prefixKey struct{}
type lossWatchKey struct{}

// WithPrefix sets the etcd key prefix under which locks live (default
// "distlock"). Lockers share locks only if they use the same prefix. A
// trailing "/" is ignored; the prefix must not be empty.
func WithPrefix(prefix string) distlock.Option {
	p := strings.TrimRight(prefix, "/")
	if p == "" {
		return driver.InvalidOption("etcd: empty key prefix %q", prefix)
	}
	return driver.BackendOption("etcd", "WithPrefix", prefixKey{}, p)
}

// WithLossWatch turns on (the default) or off the watch each held lock keeps
// on its own key, which closes Lease.Done soon after the key is deleted
// (lease revoked or expired): within a round trip, or about 100 ms for a lock
// acquired less than 100 ms earlier (the watch is made only after that, so
// short holds do not pay for it). Without it a loss is noticed at the next
// refresh or at the local deadline.
func WithLossWatch(on bool) distlock.Option {
	return driver.BackendOption("etcd", "WithLossWatch", lossWatchKey{}, on)
}

// New returns a Locker on client. The client stays the caller's: closing the
// Locker does not close it. opts are distlock's options (WithTTL…) and this
// package's (WithPrefix, WithLossWatch).
//
// Guarantees().FailuresTolerated assumes the client's endpoints are the
// cluster's members: a minority of them, (n−1)/2.
func New(client *clientv3.Client, opts ...distlock.Option) (distlock.Locker, error) {
	b, err := newBackend(client, false, opts)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, opts...) // closes b if it fails
}

// NewBackend returns the raw Backend on client, for wrapping (tests,
// middleware) before passing it to distlock.New. It implements
// driver.Blocker. As with New, the client is not closed by Close.
func NewBackend(client *clientv3.Client, opts ...distlock.Option) (driver.Backend, error) {
	return newBackend(client, false, opts)
}

func newBackend(cli *clientv3.Client, owns bool, opts []distlock.Option) (*backend, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcd: nil client", distlock.ErrInvalidOption)
	}
	o, err := driver.Resolve(driver.Settings{}, "etcd", opts)
	if err != nil {
		return nil, err
	}
	prefix := driver.BackendValueOr[string](o, prefixKey{}, DefaultPrefix)
	loss := driver.BackendValueOr[bool](o, lossWatchKey{}, true)
	life, stop := context.WithCancel(context.Background())
	return &backend{
		cli: cli, owns: owns, prefix: prefix, lossWatch: loss,
		tolerated: (len(cli.Endpoints()) - 1) / 2,
		life:      life, stop: stop,
		spares: map[int64][]*lease{},
	}, nil
}

// open serves etcd://host:port[,host:port…]/?prefix=…&dial_timeout=…&loss_watch=…
// The client it makes belongs to the Locker and is closed by its Close.
func open(ctx context.Context, u *url.URL, opts []distlock.Option) (driver.Backend, error) {
	q := driver.NewQuery(u)
	var own []distlock.Option
	if p, ok := q.String("prefix"); ok {
		own = append(own, WithPrefix(p))
	}
	if v, ok := q.Bool("loss_watch"); ok {
		own = append(own, WithLossWatch(v))
	}
	dial := DefaultDialTimeout
	if d, ok := q.Duration("dial_timeout"); ok {
		if d <= 0 {
			return nil, fmt.Errorf("%w: etcd: dial_timeout=%v must be positive", distlock.ErrInvalidURL, d)
		}
		dial = d
	}
	if err := q.Done(); err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%w: etcd: URL path %q is not used; set the key prefix with ?prefix=", distlock.ErrInvalidURL, u.Path)
	}
	var endpoints []string
	for _, h := range strings.Split(u.Host, ",") {
		if h = strings.TrimSpace(h); h != "" {
			endpoints = append(endpoints, h)
		}
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd: no endpoints in %q (want etcd://host:port,host:port/)", distlock.ErrInvalidURL, u.Redacted())
	}
	opts = append(own, opts...)
	if _, err := driver.Resolve(driver.Settings{}, "etcd", opts); err != nil {
		return nil, err // before dialling
	}
	if err := driver.Reachable(ctx, endpoints, dial); err != nil {
		return nil, err
	}
	cfg := clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		cfg.DialTimeout = dial // bounds the authentication New does
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: connecting to %v: %w", endpoints, err)
	}
	b, err := newBackend(cli, true, opts)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	// The client dials lazily: ask the cluster something (a linearizable
	// read needs a quorum) so a down cluster fails Open, within its deadline.
	pctx, cancel := context.WithTimeout(ctx, dial)
	_, err = cli.Get(pctx, b.prefix, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		_ = b.Close()
		return nil, driver.Unavailable(strings.Join(endpoints, ","), err)
	}
	return b, nil
}

// backend implements driver.Backend and driver.Blocker.
type backend struct {
	driver.NoNotice
	cli       *clientv3.Client
	owns      bool // the client was made by open and is closed by Close
	prefix    string
	lossWatch bool
	tolerated int

	life context.Context // ends at Close; parent of the loss watches
	stop context.CancelFunc
	wg   sync.WaitGroup // loss-watch goroutines

	mu     sync.Mutex
	closed bool
	spares map[int64][]*lease // recycled leases by requested seconds
}

// lease is an etcd lease used by one lock (or one waiter) at a time.
type lease struct {
	id   clientv3.LeaseID
	secs int64 // seconds asked of the server: the recycling bucket

	mu    sync.Mutex
	ttl   time.Duration // as granted (or last renewed) by the server
	until time.Time     // start of the last call that confirmed it + ttl
}

func (l *lease) confirmed(start time.Time, ttlSecs int64) {
	l.mu.Lock()
	l.ttl = time.Duration(ttlSecs) * time.Second
	l.until = start.Add(l.ttl)
	l.mu.Unlock()
}

func (l *lease) left(at time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until.Sub(at)
}

func (l *lease) period() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// leaseSeconds is the TTL asked of etcd for ttl: whole seconds, rounded up,
// plus one second of headroom so a recycled lease can still cover ttl.
func leaseSeconds(ttl time.Duration) int64 {
	return int64(math.Ceil(ttl.Seconds())) + 1
}

var keyEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// queue returns the etcd prefix of key's queue: "prefix/escaped-key/".
func (b *backend) queue(key string) string { return queuePrefix(b.prefix, key) }

func queuePrefix(prefix, key string) string {
	return prefix + "/" + keyEscaper.Replace(key) + "/"
}

// takeLease returns a lease that lasts at least ttl from now: a recycled one
// if possible (no round trip), else a new grant.
func (b *backend) takeLease(ctx context.Context, ttl time.Duration) (*lease, error) {
	secs := leaseSeconds(ttl)
	now := time.Now()
	b.mu.Lock()
	s := b.spares[secs]
	for len(s) > 0 {
		l := s[len(s)-1]
		s = s[:len(s)-1]
		if l.left(now) >= ttl+spareMargin {
			b.spares[secs] = s
			b.mu.Unlock()
			return l, nil
		}
		// Too close to its end: leave it to expire on the server.
	}
	b.spares[secs] = s
	b.mu.Unlock()

	start := time.Now()
	resp, err := b.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("etcd: granting a %ds lease: %w", secs, err)
	}
	l := &lease{id: resp.ID, secs: secs}
	l.confirmed(start, resp.TTL)
	return l, nil
}

// putSpare offers an unused, live lease for reuse.
func (b *backend) putSpare(l *lease) {
	if l.left(time.Now()) <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed && len(b.spares[l.secs]) < maxSpares {
		b.spares[l.secs] = append(b.spares[l.secs], l)
	}
}

// keepAlive renews l once and records the confirmation.
func (b *backend) keepAlive(ctx context.Context, l *lease) error {
	start := time.Now()
	resp, err := b.cli.KeepAliveOnce(ctx, l.id)
	if err != nil {
		return err
	}
	l.confirmed(start, resp.TTL)
	return nil
}

func leaseGone(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// handle is the backend's state of one held lock; it is Grant.Handle.
type handle struct {
	key string // the etcd key: queue + owner
	rev int64  // its CreateRevision: the token

	mu        sync.Mutex
	lease     *lease
	state     handleState
	gone      bool          // the loss watch saw the key deleted
	lost      chan struct{} // Grant.Lost
	lostShut  bool
	stopWatch context.CancelFunc
}

type handleState int

const (
	held handleState = iota
	releasing
	ended
)

// As gives lease-level access (see Lease.As): a *clientv3.Cmp that is true
// only while this lease's key still exists with its CreateRevision, i.e.
// while it owns the lock — put it in the If of your own transactions to
// guard etcd writes — and a *clientv3.LeaseID, the etcd lease the key is
// bound to now (it changes when a Refresh changes the TTL, and is reused by
// later locks of the Locker once released: attach nothing to it).
func (h *handle) As(target any) bool {
	switch t := target.(type) {
	case *clientv3.Cmp:
		*t = clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
		return true
	case *clientv3.LeaseID:
		h.mu.Lock()
		*t = h.lease.id
		h.mu.Unlock()
		return true
	}
	return false
}

// shutLost closes Grant.Lost once; h.mu must be held.
func (h *handle) shutLost() {
	if !h.lostShut {
		h.lostShut = true
		close(h.lost)
	}
}

// markGone is the loss watch's report that the key was deleted.
func (h *handle) markGone() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gone = true
	if h.state == held {
		h.shutLost()
	}
}

// end marks the lock over and stops its watch.
func (h *handle) end() {
	h.mu.Lock()
	h.state = ended
	stop := h.stopWatch
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// grant builds the Grant of a lock now owned; start is when the round trip
// (or watch event) that confirmed ownership began (arrived), watchFrom a
// revision at which the key was known to exist.
func (b *backend) grant(req driver.Request, key string, rev, watchFrom int64, l *lease, start time.Time) driver.Grant {
	h := &handle{key: key, rev: rev, lease: l, lost: make(chan struct{})}
	// Zero would mean "the requested TTL" to the portable layer.
	validity := max(min(req.TTL, l.left(start)), time.Nanosecond)
	g := driver.Grant{Token: distlock.Token(rev), Validity: validity, Start: start, Handle: h}
	if b.lossWatch && b.watchLoss(h, watchFrom) {
		g.Lost = h.lost
	}
	return g
}

// watchLoss starts h's loss watch from revision from; false if the backend
// is closed.
func (b *backend) watchLoss(h *handle, from int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	ctx, cancel := context.WithCancel(b.life)
	h.stopWatch = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer cancel()
		// Short holds never pay for a watch: it is made only once the lock
		// has been held a little while. Starting at from, it misses nothing
		// that happened meanwhile. (Watch also blocks for a round trip,
		// which this keeps off the acquire's path.)
		t := time.NewTimer(lossWatchDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		wch := b.cli.Watch(ctx, h.key, clientv3.WithRev(from), clientv3.WithFilterPut())
		for wr := range wch {
			if wr.Err() != nil {
				// Compacted or cancelled: Refresh still catches a loss.
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					h.markGone()
					return
				}
			}
		}
	}()
	return true
}

func (b *backend) Guarantees() distlock.Guarantees {
	return distlock.Guarantees{
		Backend:           "etcd",
		TokenSource:       "CreateRevision of the owner key (cluster-wide revision)",
		Wait:              distlock.WaitQueue,
		FIFO:              true,
		FailuresTolerated: b.tolerated,
		Notes: []string{
			"FailuresTolerated assumes the client's endpoints are the cluster's members: a minority, (n-1)/2, may fail",
			"lease TTLs are whole seconds: a TTL is sent as ceil(TTL)+1s (at least the server's minimum, 2s on etcd defaults); the validity reported never exceeds the TTL, but a crashed holder's lock frees only when that lease expires",
			"a lock acquired after a long wait may report a validity below its TTL (at least about 2/3 of it): use WithAutoRenew or Do",
			"TryAcquire fails while waiters are queued (FIFO), and does not report the holder's remaining TTL",
		},
	}
}

// TryLock creates the key only if nothing is queued for it: one round trip on
// a recycled lease.
func (b *backend) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	l, err := b.takeLease(ctx, req.TTL)
	if err != nil {
		return driver.Grant{}, err
	}
	q := b.queue(req.Key)
	me := q + req.Owner
	start := time.Now()
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(q), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(me, "", clientv3.WithLease(l.id))).
		Commit()
	if err != nil {
		// The put may have happened: the lease is dropped, not recycled, so
		// the key goes with it.
		return driver.Grant{}, fmt.Errorf("etcd: creating %q: %w", me, err)
	}
	if !resp.Succeeded {
		b.putSpare(l)
		return driver.Grant{}, &distlock.HeldError{Key: req.Key}
	}
	rev := resp.Header.Revision // a one-write txn: the key's CreateRevision
	return b.grant(req, me, rev, rev+1, l, start), nil
}

// Lock joins key's queue and waits for its predecessor to go.
func (b *backend) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	l, err := b.takeLease(ctx, req.TTL)
	if err != nil {
		return driver.Grant{}, err
	}
	q := b.queue(req.Key)
	me := q + req.Owner
	start := time.Now()
	// One round trip: create our key, read the owner (lowest CreateRevision)
	// and our predecessor (the two newest keys are us and it).
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpPut(me, "", clientv3.WithLease(l.id)),
		clientv3.OpGet(q, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...),
		clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(2),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)),
	).Commit()
	if err != nil {
		b.abandon(ctx, me, l, err)
		return driver.Grant{}, fmt.Errorf("etcd: joining the queue of %q: %w", req.Key, err)
	}
	rev := resp.Header.Revision
	owner := resp.Responses[1].GetResponseRange().GetKvs()
	newest := resp.Responses[2].GetResponseRange().GetKvs()
	if len(owner) == 0 || len(newest) == 0 || string(newest[0].Key) != me {
		err := fmt.Errorf("etcd: queue of %q read back without our key", req.Key)
		b.abandon(ctx, me, l, rpctypes.ErrLeaseNotFound) // do not trust the lease
		return driver.Grant{}, err
	}
	if string(owner[0].Key) == me {
		return b.grant(req, me, rev, rev+1, l, start), nil
	}
	pos := position{pred: string(newest[1].Key), predIsOwner: string(newest[1].Key) == string(owner[0].Key), from: rev + 1}
	g, err := b.wait(ctx, req, q, me, rev, l, pos)
	if err != nil {
		if !errors.Is(err, errKeyGone) {
			b.abandon(ctx, me, l, err)
		}
		return driver.Grant{}, err
	}
	return g, nil
}

// position is a waiter's place in the queue: whom it watches, from when.
type position struct {
	owner       bool // we are first: the lock is ours
	pred        string
	predIsOwner bool  // pred held the lock: its deletion hands it to us
	from        int64 // first revision the watch must see
}

var errKeyGone = errors.New("etcd: our queue key disappeared while waiting (its lease expired or was revoked)")

// wait waits in the queue until we own the lock or ctx ends. It keeps the
// waiter's lease alive and follows its predecessors until none is left.
func (b *backend) wait(ctx context.Context, req driver.Request, q, me string, rev int64, l *lease, pos position) (driver.Grant, error) {
	// Renew before a third of the lease has gone, or sooner if a recycled
	// lease has less left than that.
	ka := time.NewTimer(min(l.period()/3, l.left(time.Now())/2))
	defer ka.Stop()
	for {
		next, start, err := b.follow(ctx, q, me, rev, l, pos, ka)
		if err != nil {
			return driver.Grant{}, err
		}
		if next.owner {
			return b.owned(ctx, req, me, rev, l, start, next.from)
		}
		pos = next
	}
}

// follow watches pos.pred, and only it, until it goes, and returns our next
// position and when it was learnt (the start of the confirming round trip,
// or the arrival of the deletion). It renews l each time ka fires.
func (b *backend) follow(ctx context.Context, q, me string, rev int64, l *lease, pos position, ka *time.Timer) (position, time.Time, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Watch from the store's current revision, not from pos.from: etcd
	// serves a watch that starts in the past from its catch-up loop, which
	// runs every 100 ms, while one that starts now hears a change at once.
	// The Created header says where it starts; a re-read covers the gap.
	wch := b.cli.Watch(wctx, pos.pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	var (
		created time.Time // when the watch was confirmed
		hdr     int64     // it hears every revision after hdr
		checks  int       // re-reads made since
	)
	check := time.NewTimer(time.Hour)
	check.Stop()
	defer check.Stop()
	// recheck re-reads the queue once the watch exists: a predecessor still
	// there then is deleted later, at a revision the watch hears. done means
	// the position changed (or the read failed) and follow must return.
	//
	// etcd reads the header's revision before it registers a watch, so a
	// write landing in between leaves the watch in the catch-up loop while
	// its header claims it is current. A read at revision hdr proves that
	// did not happen; while reads show later revisions, a few more, spread
	// over the loop's 100 ms, bound the delay a raced watch could cause.
	recheck := func() (next position, start time.Time, done bool, err error) {
		checks++
		start = time.Now()
		next, err = b.position(ctx, q, me, rev)
		switch {
		case errors.Is(err, errKeyGone):
			return position{}, time.Time{}, true, err
		case err != nil:
			// The gap may not be covered: read until it is.
			next, start, err = b.reposition(ctx, q, me, rev)
			return next, start, true, err
		case next.owner || next.pred != pos.pred:
			return next, start, true, nil
		}
		// A waiter predecessor may have become the owner meanwhile: then
		// its deletion makes us the owner, with no re-read.
		pos.predIsOwner = next.predIsOwner
		if next.from-1 > hdr && checks < len(syncChecks) {
			check.Reset(time.Until(created.Add(syncChecks[checks])))
		}
		return position{}, time.Time{}, false, nil
	}
	for {
		select {
		case <-ctx.Done():
			return position{}, time.Time{}, ctx.Err()
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				// Broken (ctx, compaction, no leader…): re-read the queue.
				return b.reposition(ctx, q, me, rev)
			}
			if wr.Created {
				created, hdr = time.Now(), wr.Header.Revision
				if hdr >= pos.from {
					// The store moved on since we read the queue.
					if next, start, done, err := recheck(); done {
						return next, start, err
					}
				} else {
					check.Reset(syncChecks[0])
				}
			}
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.DELETE {
					continue
				}
				if pos.predIsOwner {
					// Nobody is left below us and nobody can join below us.
					return position{owner: true, from: ev.Kv.ModRevision + 1}, time.Now(), nil
				}
				return b.reposition(ctx, q, me, rev) // a waiter left: find the next one
			}
		case <-check.C:
			if next, start, done, err := recheck(); done {
				return next, start, err
			}
		case <-ka.C:
			period := l.period()
			kctx, kcancel := context.WithTimeout(ctx, period/3)
			err := b.keepAlive(kctx, l)
			kcancel()
			if leaseGone(err) {
				return position{}, time.Time{}, errKeyGone
			}
			next := period / 3
			if err != nil {
				next = min(next, time.Second) // try again sooner
			}
			ka.Reset(next)
		}
	}
}

// reposition re-reads our position, pausing and trying again while the
// connection fails (an election, a member going away) until ctx ends.
func (b *backend) reposition(ctx context.Context, q, me string, rev int64) (position, time.Time, error) {
	for {
		start := time.Now()
		pos, err := b.position(ctx, q, me, rev)
		if err == nil {
			return pos, start, nil
		}
		if errors.Is(err, errKeyGone) {
			return position{}, time.Time{}, err
		}
		if cerr := ctx.Err(); cerr != nil {
			return position{}, time.Time{}, cerr
		}
		if err := sleep(ctx, retryPause); err != nil {
			return position{}, time.Time{}, err
		}
	}
}

// owned finishes a wait that made us the owner: it makes sure the lease has a
// fair share of its TTL left (renewing it if not) and builds the grant.
func (b *backend) owned(ctx context.Context, req driver.Request, me string, rev int64, l *lease, start time.Time, watchFrom int64) (driver.Grant, error) {
	if l.left(start) < req.TTL/2 {
		start = time.Now()
		if err := b.keepAlive(ctx, l); err != nil {
			if leaseGone(err) {
				return driver.Grant{}, errKeyGone
			}
			if l.left(start) <= 0 {
				return driver.Grant{}, fmt.Errorf("etcd: confirming the lease of %q: %w", req.Key, err)
			}
		}
	}
	return b.grant(req, me, rev, watchFrom, l, start), nil
}

// position reads where our key stands in the queue, in one round trip that
// also checks the key still exists.
func (b *backend) position(ctx context.Context, q, me string, rev int64) (position, error) {
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(me), "=", rev)).
		Then(
			clientv3.OpGet(q, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...),
			clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
				clientv3.WithMaxCreateRev(rev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)),
		).Commit()
	if err != nil {
		return position{}, err
	}
	if !resp.Succeeded {
		return position{}, errKeyGone
	}
	from := resp.Header.Revision + 1
	owner := resp.Responses[0].GetResponseRange().GetKvs()
	pred := resp.Responses[1].GetResponseRange().GetKvs()
	if len(pred) == 0 || (len(owner) > 0 && string(owner[0].Key) == me) {
		return position{owner: true, from: from}, nil
	}
	return position{
		pred:        string(pred[0].Key),
		predIsOwner: len(owner) > 0 && string(owner[0].Key) == string(pred[0].Key),
		from:        from,
	}, nil
}

// abandon removes a key whose acquire failed (with cause) or was cancelled,
// on a context of its own since ctx may be over. If that fails too, the lease
// is dropped and takes the key with it when it expires.
func (b *backend) abandon(ctx context.Context, me string, l *lease, cause error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	// Recycle the lease only if the key was there to delete: if it was not,
	// a lost Put may still be on its way and would sit on a lease that is
	// reused and kept alive. Dropped, the lease takes such a key with it.
	if resp, err := b.cli.Delete(cctx, me); err == nil && resp.Deleted == 1 && !leaseGone(cause) {
		b.putSpare(l)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func handleOf(g driver.Grant) (*handle, error) {
	h, ok := g.Handle.(*handle)
	if !ok || h == nil {
		return nil, fmt.Errorf("%w: etcd: the grant was not made by this backend", distlock.ErrInvalidOption)
	}
	return h, nil
}

// Refresh renews the lock's lease (if it does not already cover ttl) and
// checks the key is still ours. A new TTL moves the key to a lease of that
// TTL; the key keeps its CreateRevision, so the token does not change.
func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	h, err := handleOf(g)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	state, l := h.state, h.lease
	h.mu.Unlock()
	if state != held {
		return 0, fmt.Errorf("%w: etcd: %q already released", distlock.ErrNotHeld, h.key)
	}
	start := time.Now()
	ours := clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)
	onLease := clientv3.Compare(clientv3.LeaseValue(h.key), "=", int64(l.id))

	if leaseSeconds(ttl) == l.secs {
		if l.left(start) < ttl {
			if err := b.keepAlive(ctx, l); err != nil {
				if leaseGone(err) {
					h.end()
					return 0, fmt.Errorf("%w: etcd: the lease of %q has expired or was revoked", distlock.ErrNotHeld, h.key)
				}
				return 0, fmt.Errorf("etcd: renewing the lease of %q: %w", h.key, err)
			}
		}
		resp, err := b.cli.Txn(ctx).If(ours, onLease).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd: checking %q: %w", h.key, err)
		}
		if !resp.Succeeded {
			h.end()
			return 0, fmt.Errorf("%w: etcd: %q is gone", distlock.ErrNotHeld, h.key)
		}
		return max(min(ttl, l.left(start)), time.Nanosecond), nil
	}

	nl, err := b.takeLease(ctx, ttl)
	if err != nil {
		return 0, err
	}
	resp, err := b.cli.Txn(ctx).If(ours, onLease).Then(clientv3.OpPut(h.key, "", clientv3.WithLease(nl.id))).Commit()
	if err != nil {
		// Unknown outcome: keep the old lease; if the key did move, the next
		// refresh finds it off that lease and reports the loss.
		return 0, fmt.Errorf("etcd: moving %q to a %v lease: %w", h.key, ttl, err)
	}
	if !resp.Succeeded {
		b.putSpare(nl)
		h.end()
		return 0, fmt.Errorf("%w: etcd: %q is gone", distlock.ErrNotHeld, h.key)
	}
	h.mu.Lock()
	h.lease = nl
	h.mu.Unlock()
	b.putSpare(l)
	return max(min(ttl, nl.left(start)), time.Nanosecond), nil
}

// Unlock deletes the key only if it still has its CreateRevision, so a
// retried release cannot delete anyone else's key; the lease is recycled.
func (b *backend) Unlock(ctx context.Context, g driver.Grant) error {
	if g.Handle == nil && g.Owner != "" {
		return b.unlockAttempt(ctx, g)
	}
	h, err := handleOf(g)
	if err != nil {
		return err
	}
	h.mu.Lock()
	if h.state != held {
		h.mu.Unlock()
		return fmt.Errorf("%w: etcd: %q already released", distlock.ErrNotHeld, h.key)
	}
	// Our own delete must not look like a loss to the watch.
	h.state = releasing
	l := h.lease
	h.mu.Unlock()

	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.rev)).
		Then(clientv3.OpDelete(h.key)).
		Commit()
	if err != nil {
		h.mu.Lock()
		h.state = held
		if h.gone {
			h.shutLost() // deleted meanwhile, by us or not: report it
		}
		h.mu.Unlock()
		return fmt.Errorf("etcd: deleting %q: %w", h.key, err)
	}
	h.end()
	if !resp.Succeeded {
		return fmt.Errorf("%w: etcd: %q is gone", distlock.ErrNotHeld, h.key)
	}
	b.putSpare(l)
	return nil
}

// unlockAttempt deletes the queue key of a TryLock whose reply was lost. The
// key's name holds the attempt's owner value, so it cannot be anyone else's;
// its lease was dropped by TryLock and ends with its TTL.
func (b *backend) unlockAttempt(ctx context.Context, g driver.Grant) error {
	me := b.queue(g.Key) + g.Owner
	resp, err := b.cli.Delete(ctx, me)
	switch {
	case err != nil:
		return fmt.Errorf("etcd: deleting %q: %w", me, err)
	case resp.Deleted == 0:
		return fmt.Errorf("%w: etcd: %q does not exist", distlock.ErrNotHeld, me)
	}
	return nil
}

// Close stops the loss watches, revokes the recycled leases (best effort,
// bounded) and closes the client if the backend made it (Open). Locks still
// held keep their leases until they expire.
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	var spares []*lease
	for _, s := range b.spares {
		spares = append(spares, s...)
	}
	b.spares = nil
	b.mu.Unlock()

	b.stop()
	b.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	now := time.Now()
	for _, l := range spares {
		if l.left(now) > 0 && ctx.Err() == nil {
			_, _ = b.cli.Revoke(ctx, l.id)
		}
	}
	cancel()
	if b.owns {
		return b.cli.Close()
	}
	return nil
}

// As gives access to the etcd client: target must be a **clientv3.Client.
func (b *backend) As(target any) bool {
	if p, ok := target.(**clientv3.Client); ok {
		*p = b.cli
		return true
	}
	return false
}
