package etcd

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// queueWatchState reads the loss watch's record of queue q.
func queueWatchState(b *backend, q string) (covered bool, seen int64, ok bool) {
	b.loss.mu.Lock()
	defer b.loss.mu.Unlock()
	qw := b.loss.queues[q]
	if qw == nil {
		return false, 0, false
	}
	return qw.covered, qw.seen, true
}

// A loss watch resumed after a break (from the revision after the last it
// saw) is served by etcd's catch-up loop, about 10,000 revisions a second,
// and puts are filtered out (NOPUT): a catch-up through a long run of puts
// in the queue's range sends nothing, not even progress. Resumed from
// there, each session outlasted silentAfter, was made again from the same
// revision, and the deletion of the lock after the puts was never heard.
// A watch that would replay more than maxCatchUp revisions is now made
// afresh, its keys read.
func TestLossNoticeAfterLongCatchUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 120*time.Second)
	b, l := e.backendLocker()
	gate := make(chan struct{}, 4)
	gate <- struct{}{} // the first session is made at once
	b.loss.beforeWatch = func() { <-gate }

	ls, err := l.TryAcquire(ctx, "catch-up", distlock.WithTTL(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	key := ownerKey(t, ls)
	q := key[:strings.LastIndex(key, "/")+1]
	// Until the queue's watch covers the lock.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if covered, _, _ := queueWatchState(b, q); covered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue's watch was not confirmed within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	b.loss.mu.Lock()
	b.loss.cancel() // break the session; the next waits at the gate
	b.loss.mu.Unlock()

	// History in the queue's range for the resumed watch to catch up on:
	// many 100 ms rounds of 1000 revisions each.
	const fillers = 60000
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < fillers; i += 32 {
				if _, err := e.admin.Put(ctx, fmt.Sprintf("%sfiller-%d", q, w), "x"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	del, err := e.admin.Delete(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if del.Deleted != 1 {
		t.Fatalf("deleted %d keys", del.Deleted)
	}
	deletedAt := del.Header.Revision
	select {
	case <-ls.Done():
		t.Fatal("reported with no watch up: the test does not test the resume")
	default:
	}

	var sessions atomic.Int32
	b.loss.mu.Lock()
	b.loss.beforeWatch = func() { sessions.Add(1) }
	b.loss.mu.Unlock()
	gate <- struct{}{} // the waiting session goes on, and every later one at once

	select {
	case <-ls.Done():
	case <-time.After(20 * time.Second):
		_, seen, _ := queueWatchState(b, q)
		t.Fatalf("Done did not close within 20s of the key's deletion at revision %d (TTL 60s, no refresh): "+
			"the queue's watch still at seen=%d after %d sessions made since the gate opened; each resumed from seen+1 "+
			"and was ended by the %v silence timer before etcd's catch-up reached the deletion", deletedAt, seen, sessions.Load(), silentAfter)
	}
	t.Logf("reported after %d sessions", sessions.Load())
}
