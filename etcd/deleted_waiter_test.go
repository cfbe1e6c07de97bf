package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A waiter whose queue key is deleted by someone else (an operator, or a
// revoke of its lease) is no longer in the queue: when the holder leaves,
// the waiter behind it takes the lock, and the one whose key went must not
// take it too. etcd's concurrency.Mutex checks its key after waiting for
// the same reason. Without the loss watch nothing else would notice.
func TestDeletedWaiterKeyIsNotGranted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(ctx context.Context, e *env, key string, lease int64) error
	}{
		{"key deleted", func(ctx context.Context, e *env, key string, _ int64) error {
			_, err := e.admin.Delete(ctx, key)
			return err
		}},
		{"lease revoked", func(ctx context.Context, e *env, _ string, lease int64) error {
			_, err := e.admin.Revoke(ctx, clientv3.LeaseID(lease))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, 30*time.Second)
			const key = "deleted-waiter"
			holder, err := e.locker(WithLossWatch(false)).TryAcquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				ls  *distlock.Lease
				err error
			}
			wait := func(ctx context.Context) <-chan result {
				ch := make(chan result, 1)
				l := e.locker(WithLossWatch(false))
				go func() {
					ls, err := l.Acquire(ctx, key)
					ch <- result{ls, err}
				}()
				return ch
			}
			middle := wait(ctx)
			for e.queueLen(DefaultPrefix, key) != 2 {
				time.Sleep(5 * time.Millisecond)
			}
			last := wait(ctx)
			for e.queueLen(DefaultPrefix, key) != 3 {
				time.Sleep(5 * time.Millisecond)
			}
			// Past the waiters' first re-reads (syncChecks), so that only
			// the holder's deletion tells the middle one anything.
			time.Sleep(500 * time.Millisecond)
			kvs := e.queueKeys(key)
			if err := tc.remove(ctx, e, string(kvs[1].Key), kvs[1].Lease); err != nil {
				t.Fatal(err)
			}
			// The last waiter now follows the holder; give it time to see so.
			time.Sleep(300 * time.Millisecond)
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-last
			if r.err != nil {
				t.Fatalf("the waiter still in the queue: %v", r.err)
			}
			defer func() { _ = r.ls.Release(context.Background()) }()
			select {
			case m := <-middle:
				if m.err == nil {
					_ = m.ls.Release(context.Background())
					t.Fatalf("two holders: the waiter whose key was deleted got token %d, the next waiter %d",
						m.ls.Token(), r.ls.Token())
				}
				if !errors.Is(m.err, errKeyGone) {
					t.Errorf("the deleted waiter's Acquire: %v, want errKeyGone", m.err)
				}
			case <-time.After(2 * time.Second):
				// Still waiting (it rejoined behind the new holder): fine.
			}
		})
	}
}
