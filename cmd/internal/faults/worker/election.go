package main

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/internal/faults/history"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/fencing"
)

// errTermEnded abandons a write whose term ended before its UPDATE was sent.
var errTermEnded = errors.New("term ended before the write")

// election is the election workload: campaign for the role (the key) with
// a value naming this worker; while leading, write counter+1 through the
// term's Fence again and again, and stop the moment the term's Done closes
// (a write whose term ends between its read and its UPDATE is rolled back
// and logged as abandon); resign after a random time between -term/4 and
// -term; pause (-idle, or one nap); campaign again. A term is logged as a lease is (acquire with the
// campaign value, lost, release), so the harness's rules judge terms.
func (w *worker) election(ctx context.Context, watchers *sync.WaitGroup) error {
	el, err := election.New(w.locker, w.key)
	if err != nil {
		return err
	}
	value := history.CandidateValue(w.id)
	for n := 0; w.ops == 0 || n < w.ops; n++ {
		if ctx.Err() != nil {
			return nil
		}
		actx, acancel := context.WithTimeout(ctx, w.wait)
		t0 := mono()
		term, err := el.Campaign(actx, value)
		acancel()
		if err != nil {
			if ctx.Err() != nil {
				w.rec.log(Event{Ev: "stopped", T0: t0})
				return nil
			}
			w.rec.log(Event{Ev: "error", T0: t0, Err: "campaign: " + err.Error()})
			time.Sleep(50 * time.Millisecond)
			continue
		}
		lease := term.Lease()
		tok, fence := int64(term.Token()), term.Fence()
		w.rec.log(Event{Ev: "acquire", T0: t0, Epoch: fence.Epoch, Token: tok, Holder: fence.Holder, Leader: term.Value()})
		w.setStatus("held " + strconv.FormatInt(tok, 10))
		watchLoss(watchers, w.rec, lease)

		end := time.Now().Add(w.term/4 + time.Duration(w.rng.Int64N(int64(w.term-w.term/4)+1)))
		// Operations run on a context that SIGTERM does not cut, so a
		// started write always finishes and is logged with its outcome.
		octx, ocancel := context.WithTimeout(context.Background(), time.Until(end)+20*time.Second)
		w.lead(ctx, octx, term, end)
		w.setStatus("free")
		release(octx, w.rec, lease, term.Resign)
		ocancel()
		// A pause before campaigning again (-idle, or one nap), so that
		// the other candidates, woken by the resignation, have their turn.
		if w.idle > 0 {
			rest(ctx, time.Duration(w.rng.Int64N(int64(w.idle)+1)))
		} else {
			rest(ctx, w.nap())
		}
	}
	return nil
}

// lead writes through term's Fence until end, ctx's end (SIGTERM) or the
// term's.
func (w *worker) lead(ctx, octx context.Context, term *election.Term, end time.Time) {
	tok, fence := int64(term.Token()), term.Fence()
	// nap sleeps d unless the term ends first (errTermEnded); SIGTERM cuts
	// it short and lets the write under way finish.
	nap := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-term.Done():
		}
		select {
		case <-term.Done():
			return errTermEnded
		default:
			return nil
		}
	}
	for time.Now().Before(end) && ctx.Err() == nil {
		if nap(w.nap()) != nil {
			return
		}
		wr := Event{Ev: "write", T0: mono(), Epoch: fence.Epoch, Token: tok, Holder: fence.Holder}
		var err error
		if w.mode == "guarded" {
			err = fencing.WithGuard(octx, w.pool, w.key, fence, func(tx pgx.Tx) error {
				return increment(octx, tx, w.key, w.nap(), nap, &wr)
			})
		} else {
			err = increment(octx, w.pool, w.key, w.nap(), nap, &wr)
		}
		if errors.Is(err, errTermEnded) {
			// Rolled back before the UPDATE: nothing was written.
			w.rec.log(Event{Ev: "abandon", T0: wr.T0, Epoch: fence.Epoch, Token: tok, Holder: fence.Holder, Read: wr.Read})
			return
		}
		judgeWrite(&wr, err, term.Lease())
		w.rec.log(wr)
	}
}

// observe follows the role's leaders with election.Observe and logs each
// one it is told of (token and value), until SIGTERM. It polls at most every
// 100 ms where the backend pushes no changes (Redis, Redlock).
func (w *worker) observe(ctx context.Context) error {
	el, err := election.New(w.locker, w.key)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		leaders, err := el.Observe(ctx, distlock.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
		if err != nil {
			w.rec.log(Event{Ev: "observe-error", Err: err.Error()})
			if errors.Is(err, distlock.ErrUnsupported) {
				return nil
			}
			rest(ctx, time.Second)
			continue
		}
		w.rec.log(Event{Ev: "observe-start"})
		for ld := range leaders {
			w.rec.log(Event{Ev: "observe", Token: int64(ld.Token), Leader: ld.Value})
		}
	}
	return nil
}
