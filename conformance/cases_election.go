package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
)

func (e *env) election(l distlock.Locker, role string) *election.Election {
	el, err := election.New(l, role)
	if err != nil {
		e.fail("election.New(%q): %v", role, err)
	}
	return el
}

func (e *env) campaign(el *election.Election, value string, opts ...distlock.CallOption) *election.Term {
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	t, err := el.Campaign(ctx, value, opts...)
	if err != nil {
		e.fail("Campaign(%q) for %q: %v", value, el.Role(), err)
	}
	return t
}

func (e *env) resign(t *election.Term) {
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	if err := t.Resign(ctx); err != nil {
		e.fail("Resign: %v", err)
	}
}

func electionOneLeader(e *env) {
	role := e.key("role")
	lockers := []distlock.Locker{e.locker(), e.locker(), e.locker()}
	observer := e.election(e.locker(), role)
	var (
		leaders   atomic.Int32
		mu        sync.Mutex
		last      distlock.Token
		violation error
		wg        sync.WaitGroup
	)
	report := func(err error) {
		mu.Lock()
		if violation == nil {
			violation = err
		}
		mu.Unlock()
	}
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			el, err := election.New(l, role)
			if err != nil {
				report(err)
				return
			}
			value := fmt.Sprintf("candidate-%d", i)
			for range 5 {
				ctx, cancel := e.timeout(4 * e.patience())
				t, err := el.Campaign(ctx, value, distlock.WithTTL(long))
				cancel()
				if err != nil {
					report(fmt.Errorf("Campaign under contention: %w", err))
					return
				}
				if leaders.Add(1) > 1 {
					report(errors.New("two leaders at once"))
				}
				mu.Lock()
				if t.Token() <= last {
					violation = errors.Join(violation, fmt.Errorf("term token %d not above the previous term's %d", t.Token(), last))
				}
				last = t.Token()
				mu.Unlock()
				ictx, icancel := e.timeout(e.patience())
				got, err := observer.Leader(ictx)
				icancel()
				if err != nil || got.Token != t.Token() || got.Value != value {
					report(fmt.Errorf("Leader() during the term of %q (token %d): %+v, %v", value, t.Token(), got, err))
				}
				leaders.Add(-1)
				rctx, rcancel := e.timeout(e.patience())
				err = t.Resign(rctx)
				rcancel()
				if err != nil {
					report(fmt.Errorf("Resign: %w", err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if violation != nil {
		e.fail("%v", violation)
	}
	ctx, cancel := e.timeout(e.patience())
	defer cancel()
	if _, err := observer.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		e.fail("Leader() after every term resigned: %v, want ErrNoLeader", err)
	}
}

func electionObserversSeeEveryLeader(e *env) {
	role := e.key("role")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	watcher := e.election(e.locker(), role)
	seen, err := watcher.Observe(ctx, fastPoll)
	if err != nil {
		e.fail("Observe: %v", err)
	}
	var terms []*election.Term
	for i := range 3 {
		el := e.election(e.locker(), role)
		value := fmt.Sprintf("leader-%d", i)
		t := e.campaign(el, value, distlock.WithTTL(long))
		got := nextChange(e, seen, "the observer, after "+value+" was elected")
		if got.Token != t.Token() || got.Value != value {
			e.fail("the observer saw %+v after %q was elected with token %d (every leader, in order, expected)", got, value, t.Token())
		}
		terms = append(terms, t)
		if i < 2 {
			e.resign(t)
		}
	}
	// A late observer starts from the current leader.
	late, err := e.election(e.locker(), role).Observe(ctx, fastPoll)
	if err != nil {
		e.fail("Observe: %v", err)
	}
	final := terms[len(terms)-1]
	if got := nextChange(e, late, "a late observer"); got.Token != final.Token() {
		e.fail("a late observer first saw %+v, want the current leader (token %d)", got, final.Token())
	}
	e.resign(final)
	select {
	case got, ok := <-seen:
		if ok {
			e.fail("the observer reported %+v after the last leader resigned (only leaders are reported)", got)
		}
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	mustClose(e, seen, "Observe after its context ended")
}

func electionResignHandsOver(e *env) {
	role := e.key("role")
	a, b := e.election(e.locker(), role), e.election(e.locker(), role)
	first := e.campaign(a, "a", distlock.WithTTL(long))
	elected := make(chan *election.Term, 1)
	failed := make(chan error, 1)
	go func() {
		ctx, cancel := e.timeout(e.patience())
		defer cancel()
		t, err := b.Campaign(ctx, "b", distlock.WithTTL(long))
		if err != nil {
			failed <- err
			return
		}
		elected <- t
	}()
	select {
	case t := <-elected:
		e.fail("a second candidate was elected (token %d) while the first leads", t.Token())
	case err := <-failed:
		e.fail("Campaign of a waiting candidate: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	began := time.Now()
	e.resign(first)
	select {
	case t := <-elected:
		if t.Token() <= first.Token() {
			e.fail("the next term's token %d is not above the resigned term's %d", t.Token(), first.Token())
		}
		if d := time.Since(began); d > long/4 {
			e.fail("the waiting candidate was elected %v after the resignation: that is the TTL, not a hand-over", d)
		}
		e.waitTermDone(first, 0, distlock.ErrReleased, "the resigned term")
		e.resign(t)
	case err := <-failed:
		e.fail("Campaign of a waiting candidate after the leader resigned: %v", err)
	}
}

func electionPausedLeaderReplaced(e *env) {
	role := e.key("role")
	paused := e.locker()
	a, b := e.election(paused, role), e.election(e.locker(), role)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	seen, err := e.election(e.locker(), role).Observe(ctx, fastPoll)
	if err != nil {
		e.fail("Observe: %v", err)
	}
	first := e.campaign(a, "paused", distlock.WithTTL(e.h.TTL))
	if got := nextChange(e, seen, "the first leader"); got.Token != first.Token() {
		e.fail("the observer saw %+v, want the first leader (token %d)", got, first.Token())
	}
	e.crash(paused) // it stops renewing, as a stopped process would
	next := e.campaign(b, "next", distlock.WithTTL(long))
	if next.Token() <= first.Token() {
		e.fail("the next term's token %d is not above the paused leader's %d", next.Token(), first.Token())
	}
	// The paused leader's Done must have closed by now: its lease's local
	// deadline comes before the server frees the lock. A timer's lateness
	// on a loaded machine is allowed for.
	e.waitTermDone(first, max(e.h.TTL/3, 250*time.Millisecond), distlock.ErrLeaseLost, "the paused leader's term, once another was elected")
	if got := nextChange(e, seen, "the leader after the paused one"); got.Token != next.Token() || got.Value != "next" {
		e.fail("the observer saw %+v, want the next leader (token %d)", got, next.Token())
	}
	e.resign(next)
}

// waitTermDone checks that t's Done closes within d (0: closed already) and
// that Err matches want.
func (e *env) waitTermDone(t *election.Term, d time.Duration, want error, why string) {
	select {
	case <-t.Done():
	default:
		select {
		case <-t.Done():
		case <-time.After(d):
			e.fail("%s: Done did not close within %v", why, d)
		}
	}
	if err := t.Err(); !errors.Is(err, want) {
		e.fail("%s: Err() = %v, want %v", why, err, want)
	}
}
