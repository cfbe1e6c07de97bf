package conformance

import (
	"context"
	"errors"
	"fmt"
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

// fifoHandOff checks a FIFO claim: callers that began waiting one after
// another take the key in that order, and a holder that asks again right
// after its release queues behind them.
func fifoHandOff(e *env) {
	a := e.locker()
	if !a.Guarantees().FIFO {
		e.skip("the backend does not claim FIFO")
	}
	key := e.key("k")
	first := e.tryAcquire(a, key, distlock.WithTTL(long))
	const waiters = 4
	order := make(chan int, waiters+1)
	errc := make(chan error, waiters+1)
	wait := func(l distlock.Locker, id int) {
		ctx, cancel := e.timeout(e.patience())
		defer cancel()
		ls, err := l.Acquire(ctx, key, distlock.WithTTL(long))
		if err != nil {
			errc <- fmt.Errorf("waiter %d: %w", id, err)
			return
		}
		order <- id
		time.Sleep(20 * time.Millisecond) // a waiter woken out of turn has time to take it next
		if err := ls.Release(ctx); err != nil {
			errc <- fmt.Errorf("waiter %d: Release: %w", id, err)
		}
	}
	for i := range waiters {
		go wait(e.locker(), i)
		e.eventually(fmt.Sprintf("waiter %d queued", i), func() (bool, string) {
			h := e.inspect(a, key, "while callers queue one by one")
			return h.Waiters == i+1, "Inspect: " + holderString(h)
		})
	}
	e.release(first)
	go wait(a, waiters) // the former holder, asking again at once
	for want := 0; want <= waiters; want++ {
		select {
		case got := <-order:
			if got != want {
				e.fail("waiter %d took the key when waiter %d was next (waiters are numbered in the order they began waiting; %d is the former holder asking again)", got, want, waiters)
			}
		case err := <-errc:
			e.fail("%v", err)
		case <-time.After(e.patience()):
			e.fail("waiter %d did not take the key within %v", want, e.patience())
		}
	}
}
