package conformance

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
)

func mutualExclusion(e *env) {
	key := e.key("k")
	lockers := []distlock.Locker{e.locker(), e.locker(), e.locker()}
	var (
		inside    atomic.Int32
		mu        sync.Mutex // guards last
		last      distlock.Token
		vmu       sync.Mutex // guards violation
		violation error
		wg        sync.WaitGroup
	)
	report := func(err error) {
		vmu.Lock()
		if violation == nil {
			violation = err
		}
		vmu.Unlock()
	}
	for g := 0; g < e.h.Contenders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[g%len(lockers)]
			for i := 0; i < e.h.Rounds; i++ {
				ctx, cancel := e.timeout(e.patience() * 4)
				ls, err := l.Acquire(ctx, key, distlock.WithTTL(long))
				cancel()
				if err != nil {
					report(errors.New("Acquire under contention: " + err.Error()))
					return
				}
				if n := inside.Add(1); n > 1 {
					report(errors.New("two holders inside the critical section at once"))
				}
				mu.Lock()
				prev := last
				last = ls.Token()
				mu.Unlock()
				if ls.Token() <= prev {
					report(errors.New("token " + ls.Token().String() + " not above the previous holder's " + prev.String()))
				}
				time.Sleep(200 * time.Microsecond)
				inside.Add(-1)
				rctx, rcancel := e.timeout(e.patience())
				err = ls.Release(rctx)
				rcancel()
				if err != nil {
					report(errors.New("Release under contention: " + err.Error()))
					return
				}
			}
		}()
	}
	wg.Wait()
	if violation != nil {
		e.fail("%v", violation)
	}
}

func tryAcquireFree(e *env) {
	l := e.locker()
	before := time.Now()
	ls := e.tryAcquire(l, e.key("k"), distlock.WithTTL(long))
	switch {
	case ls.Key() != e.key("k"):
		e.fail("Key() = %q, want %q", ls.Key(), e.key("k"))
	case ls.Token() <= 0:
		e.fail("Token() = %d, want > 0", ls.Token())
	case ls.Err() != nil:
		e.fail("Err() = %v on a fresh lease", ls.Err())
	case !ls.Expires().After(before):
		e.fail("Expires() %v is not in the future", ls.Expires())
	}
	select {
	case <-ls.Done():
		e.fail("Done() closed on a fresh lease")
	default:
	}
	e.release(ls)
}

func tryAcquireHeld(e *env) {
	a, b := e.locker(), e.locker()
	key := e.key("k")
	ls := e.tryAcquire(a, key, distlock.WithTTL(long))
	e.mustBeHeld(b, key, "another Locker")
	e.mustBeHeld(a, key, "the holder's own Locker")
	if ls.Err() != nil {
		e.fail("the holder's lease ended after failed attempts by others: %v", ls.Err())
	}
	e.release(ls)
}

func keyIsolation(e *env) {
	a, b := e.locker(), e.locker()
	k1, k2 := e.key("one"), e.key("two")
	l1 := e.tryAcquire(a, k1, distlock.WithTTL(long))
	l2 := e.tryAcquire(b, k2, distlock.WithTTL(long))
	e.release(l1)
	e.mustBeHeld(a, k2, "after releasing another key")
	if l2.Err() != nil {
		e.fail("releasing %q ended the lease on %q: %v", k1, k2, l2.Err())
	}
	e.release(l2)
}
