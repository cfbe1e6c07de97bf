package etcd

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

const (
	// restartMin and restartMax bound the pause before the loss watch is
	// made again after it broke (doubling while it keeps failing).
	restartMin = 50 * time.Millisecond
	restartMax = time.Second
	// checkChunk is how many keys one check transaction reads (etcd's
	// default --max-txn-ops is 128).
	checkChunk = 128
	// checkTimeout bounds one check transaction.
	checkTimeout = 5 * time.Second
	// progressEvery is how often the watch asks its member for a progress
	// notice; a watch that heard nothing for silentAfter is made again (on
	// another connection, if the client's balancer has one). A member that
	// hangs with its connection open would otherwise keep every loss
	// notice back until it came back.
	progressEvery = time.Second
	silentAfter   = 3 * time.Second
	// watchTryKey is the gRPC metadata key that gives each loss watch try
	// a stream of its own.
	watchTryKey = "distlock-loss-watch-try"
)

// watcher is the backend's loss watch: one etcd watch on the whole prefix
// (deletions only), started with the first lock, that hands each deletion
// to the handle of that key, if it has one. A handle is registered before
// its key is created, so that no deletion of the key can come before it.
//
// It misses nothing: while covered, the watch (or its successor, made again
// from the revision after the last one it handed over) hears every revision
// from before the registration of every handle on. When it cannot be made
// from there (compacted), and before the first watch is up, handles are
// marked unsure; once a new watch is up, a read of each unsure key settles
// whether it was deleted in the gap.
type watcher struct {
	b *backend
	// beforeWatch, if set (by tests), runs before each watch is made.
	beforeWatch func()
	tries       uint64 // watches made; only run touches it
	// ownWatchers: the client's Watcher is its own (not wrapped), so each
	// try can have a clientv3.Watcher of its own on the same connection.
	ownWatchers bool

	// mu guards the fields below; a handle's own mu is taken inside it.
	mu      sync.Mutex
	started bool
	closed  bool
	covered bool  // the watch hears every revision after seen, or will
	seen    int64 // every deletion up to seen was handed over
	keys    map[string]*handle
	unsure  map[string]*handle // to read once the watch is up
	cancel  context.CancelFunc // ends the current watch (tests break it)
}

// add registers h, whose key is about to be created; false if the backend
// is closing (then nothing reports h's loss).
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
	w.keys[h.key] = h
	if !w.covered {
		w.unsure[h.key] = h
	}
	return true
}

// remove unregisters h (released, or its attempt failed).
func (w *watcher) remove(h *handle) {
	w.mu.Lock()
	if w.keys[h.key] == h {
		delete(w.keys, h.key)
		delete(w.unsure, h.key)
	}
	w.mu.Unlock()
}

// close stops new registrations; the caller then ends b.life and waits.
func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// run is the watch's goroutine: it makes the watch, and makes it again
// whenever it breaks, until the backend closes.
func (w *watcher) run() {
	defer w.b.wg.Done()
	pause := restartMin
	for {
		if w.beforeWatch != nil {
			w.beforeWatch()
		}
		if w.watch() {
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

// watch runs one etcd watch until it breaks; true if it was up.
func (w *watcher) watch() (up bool) {
	w.mu.Lock()
	var from int64
	if w.covered {
		from = w.seen + 1
	}
	w.mu.Unlock()
	// Each try has a gRPC stream of its own: clientv3 keeps one stream per
	// ctx metadata, and a watch abandoned before its member answered (a
	// hung member) pins that stream to the member, with every later watch
	// of the same metadata queued behind it, unsent. A watcher of the
	// try's own is closed with the try, pinned stream and all. A client
	// whose Watcher is wrapped (namespace) is watched through its wrapper,
	// with the try number as metadata: a stream pinned there stays open,
	// idle, until the member answers or the client closes.
	wt := w.b.cli.Watcher
	if w.ownWatchers {
		own := clientv3.NewWatcher(w.b.cli)
		defer func() { _ = own.Close() }() // after cancel: keepAlive is done with it
		wt = own
	}
	// WithRequireLeader: a member cut off from the leader ends the watch
	// instead of leaving it silent; it is then made again, elsewhere.
	w.tries++
	md := clientv3.WithRequireLeader(w.b.life)
	md = metadata.AppendToOutgoingContext(md, watchTryKey, strconv.FormatUint(w.tries, 10))
	ctx, cancel := context.WithCancel(md)
	defer cancel()
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(),
		clientv3.WithCreatedNotify(), clientv3.WithProgressNotify()}
	if from > 0 {
		opts = append(opts, clientv3.WithRev(from))
	}
	var heard atomic.Int64 // when the watch last heard from its member
	heard.Store(time.Now().UnixNano())
	w.b.wg.Add(1)
	go func() {
		defer w.b.wg.Done()
		w.keepAlive(ctx, wt, cancel, &heard)
	}()
	for wr := range wt.Watch(ctx, w.b.prefix+"/", opts...) {
		heard.Store(time.Now().UnixNano())
		if wr.CompactRevision != 0 {
			// The revisions after seen are gone: start afresh and read
			// every key watched.
			w.lostTrack()
			return up
		}
		if wr.Err() != nil {
			return up // made again from seen+1
		}
		if wr.Created {
			up = true
			if from == 0 {
				w.mu.Lock()
				w.covered, w.seen = true, wr.Header.Revision
				w.mu.Unlock()
			}
			if w.check(ctx) != nil {
				return up // checked again once the watch is back
			}
			continue
		}
		var last int64
		for _, ev := range wr.Events {
			last = ev.Kv.ModRevision
			if ev.Type != mvccpb.DELETE {
				continue
			}
			w.mu.Lock()
			h := w.keys[string(ev.Kv.Key)]
			w.mu.Unlock()
			if h != nil {
				h.deleted(ev.Kv.ModRevision)
			}
		}
		if wr.IsProgressNotify() {
			last = wr.Header.Revision
		}
		w.mu.Lock()
		w.seen = max(w.seen, last)
		w.mu.Unlock()
	}
	return up
}

// keepAlive asks for a progress notice every progressEvery and ends the
// watch (cancel) once it has heard nothing for silentAfter.
func (w *watcher) keepAlive(ctx context.Context, wt clientv3.Watcher, cancel context.CancelFunc, heard *atomic.Int64) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, heard.Load())) > silentAfter {
			cancel() // made again from seen+1
			return
		}
		// The watch's own ctx: progress requests go to its stream.
		rctx, rcancel := context.WithTimeout(ctx, progressEvery)
		_ = wt.RequestProgress(rctx)
		rcancel()
	}
}

// lostTrack marks every handle unsure after a gap in the watch.
func (w *watcher) lostTrack() {
	w.mu.Lock()
	w.covered, w.seen = false, 0
	for k, h := range w.keys {
		w.unsure[k] = h
	}
	w.mu.Unlock()
}

// check reads the unsure keys, the watch being up (so that a deletion
// after the read is heard): a key absent at the read's revision was
// deleted if it had been created by then.
func (w *watcher) check(ctx context.Context) error {
	for {
		w.mu.Lock()
		var hs []*handle
		for _, h := range w.unsure {
			hs = append(hs, h)
			if len(hs) == checkChunk {
				break
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
			if w.unsure[h.key] == h {
				delete(w.unsure, h.key)
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
