package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/distlock/distlock"
)

func waiterWakes(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	got := make(chan *distlock.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := e.timeout(long)
		defer cancel()
		w, err := b.Acquire(ctx, key, distlock.WithTTL(long))
		if err != nil {
			errc <- err
			return
		}
		got <- w
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter start waiting
	e.release(ls)
	select {
	case w := <-got:
		e.release(w)
	case err := <-errc:
		e.fail("waiting Acquire: %v", err)
	case <-time.After(long / 3):
		e.fail("waiter not woken within %v of the release (TTL %v)", long/3, long)
	}
}

func cancelWait(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Acquire(ctx, key, distlock.WithTTL(long))
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		e.fail("Acquire past its deadline: want ErrNotAcquired and DeadlineExceeded, got %v", err)
	}
	// Promptly: the waiter must notice its context, not wait for the
	// holder (whose TTL is 30s) or a long poll.
	if d := time.Since(start); d > 3*time.Second {
		e.fail("Acquire with a 200ms deadline returned after %v", d)
	}
	cctx, ccancel := context.WithCancel(e.ctx)
	time.AfterFunc(100*time.Millisecond, ccancel)
	if _, err := b.Acquire(cctx, key, distlock.WithTTL(long)); !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		e.fail("Acquire cancelled: want ErrNotAcquired and Canceled, got %v", err)
	}
	e.release(ls)
}

func cancelNoResidue(e *env) {
	a, b, c := e.locker(), e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(e.ctx, 150*time.Millisecond)
			defer cancel()
			_, _ = b.Acquire(ctx, key, distlock.WithTTL(long))
		}()
	}
	wg.Wait()
	e.release(ls)
	e.release(e.tryAcquire(c, key, distlock.WithTTL(long)))
}
