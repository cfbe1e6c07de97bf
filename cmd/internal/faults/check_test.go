package faults

import (
	"strings"
	"testing"
	"time"
)

// The checkers must be able to fail: each synthetic history below breaks one
// rule, and the matching counter must see it.

func acq(w int, tok, t int64) Event {
	return Event{Worker: w, Ev: "acquire", Token: tok, T0: t - 1, T: t}
}
func rel(w int, tok, t int64) Event {
	return Event{Worker: w, Ev: "release", Token: tok, T0: t, T: t + 1}
}
func lostAt(w int, tok, t int64) Event {
	return Event{Worker: w, Ev: "lost", Token: tok, T: t}
}
func wr(w int, tok, t0, t, read int64, res string) Event {
	return Event{Worker: w, Ev: "write", Token: tok, T0: t0, TW: t - 1, T: t, Read: read, Value: read + 1, Result: res}
}

// inEpoch is e with its fence at epoch ep.
func inEpoch(ep int64, e Event) Event { e.Epoch = ep; return e }

func TestCheckCleanHistory(t *testing.T) {
	evs := [][]Event{
		{acq(0, 1, 10), wr(0, 1, 11, 15, 0, "ok"), rel(0, 1, 16), acq(0, 3, 40), wr(0, 3, 41, 45, 2, "ok"), rel(0, 3, 46)},
		{acq(1, 2, 20), wr(1, 2, 21, 25, 1, "ok"), rel(1, 2, 26)},
	}
	c := check(evs, 3, 100)
	if c.Overlaps != 0 || c.LostUpdates != 0 || c.StaleAccepts != 0 || c.Linearizable != "ok" || c.Accepted != 3 {
		t.Fatalf("clean history judged %+v", c)
	}
}

func TestCheckPausedHolder(t *testing.T) {
	// Worker 0 holds token 1, is paused, loses the lock to worker 1 (token
	// 2), resumes, learns of the loss only at 60 but writes what it read
	// before the pause: an overlap, a lost update, a stale write accepted.
	evs := [][]Event{
		{acq(0, 1, 10), wr(0, 1, 11, 55, 0, "ok"), lostAt(0, 1, 60), rel(0, 1, 61)},
		{acq(1, 2, 20), wr(1, 2, 21, 25, 0, "ok"), rel(1, 2, 26)},
	}
	c := check(evs, 1, 100)
	if c.Overlaps != 1 {
		t.Errorf("overlaps = %d, want 1", c.Overlaps)
	}
	if c.LostUpdates != 1 {
		t.Errorf("lost updates = %d, want 1", c.LostUpdates)
	}
	if c.StaleAccepts != 1 {
		t.Errorf("stale accepts = %d, want 1", c.StaleAccepts)
	}
	if c.Linearizable != "illegal" {
		t.Errorf("linearizable = %s, want illegal", c.Linearizable)
	}
}

func TestCheckLossEndsBelief(t *testing.T) {
	// A holder that learned of its loss before the next grant does not
	// overlap, even if it releases later.
	evs := [][]Event{
		{acq(0, 1, 10), lostAt(0, 1, 15), rel(0, 1, 40)},
		{acq(1, 2, 20), rel(1, 2, 30)},
	}
	if c := check(evs, 0, 100); c.Overlaps != 0 {
		t.Fatalf("overlaps = %d, want 0", c.Overlaps)
	}
}

func TestCheckRejectedAndUncertain(t *testing.T) {
	// A rejected write does not count; an uncertain one may have applied.
	evs := [][]Event{
		{acq(0, 1, 10), wr(0, 1, 11, 15, 0, "ok"), wr(0, 1, 16, 18, 1, "stale"), rel(0, 1, 19)},
		{acq(1, 2, 20), wr(1, 2, 21, 25, 1, "error"), rel(1, 2, 26)},
	}
	for _, final := range []int64{1, 2} {
		c := check(evs, final, 100)
		if c.Rejected != 1 || c.Uncertain != 1 || c.LostUpdates != 0 || c.Linearizable != "ok" {
			t.Errorf("final %d: %+v", final, c)
		}
	}
	if c := check(evs, 5, 100); c.Linearizable != "illegal" {
		t.Errorf("final 5 (no such history) judged %s", c.Linearizable)
	}
}

func TestCheckLegitimateWriteRejected(t *testing.T) {
	// Worker 0's write is refused while its lease still stood (Valid): a
	// liveness failure. Worker 1's is refused after its lease ended: the
	// fence doing its job.
	legit := wr(0, 5, 11, 15, 0, "stale")
	legit.Valid = true
	evs := [][]Event{
		{acq(0, 5, 10), legit, rel(0, 5, 16)},
		{acq(1, 4, 20), lostAt(1, 4, 21), wr(1, 4, 22, 25, 0, "stale"), rel(1, 4, 26)},
	}
	c := check(evs, 0, 100)
	if c.Rejected != 2 || c.LegitRejected != 1 {
		t.Fatalf("rejected %d, rejected while valid %d; want 2 and 1", c.Rejected, c.LegitRejected)
	}
}

func TestCheckRepeatedTokenAccepted(t *testing.T) {
	// Two holders were given token 3 (a lock service that lost its
	// counter); both writes were accepted, the second after the first
	// committed: a stale write accepted. One holder writing twice is not.
	by := func(e Event, holder string) Event { e.Holder = holder; return e }
	evs := [][]Event{
		{acq(0, 3, 10), by(wr(0, 3, 11, 15, 0, "ok"), "a"), by(wr(0, 3, 16, 18, 1, "ok"), "a"), rel(0, 3, 19)},
		{acq(1, 3, 20), by(wr(1, 3, 21, 25, 2, "ok"), "b"), rel(1, 3, 26)},
	}
	if c := check(evs, 3, 100); c.StaleAccepts != 1 {
		t.Fatalf("stale accepts = %d, want 1 (holder b's write with a's token)", c.StaleAccepts)
	}
	evs[1] = nil
	if c := check(evs, 2, 100); c.StaleAccepts != 0 {
		t.Fatalf("stale accepts = %d for one holder writing twice, want 0", c.StaleAccepts)
	}
}

// TestCheckEpochRaiseIsNotStale: when the key space moves to another
// backend, the operator raises the epoch and the new backend's tokens start
// from its own counter, far below the old ones. The guard accepts them (the
// epoch is compared first), and so must the checker: writes at epoch 1 with
// small tokens after epoch-0 writes with large ones are in order.
func TestCheckEpochRaiseIsNotStale(t *testing.T) {
	evs := [][]Event{
		{acq(0, 1000, 10), wr(0, 1000, 11, 15, 0, "ok"), rel(0, 1000, 16),
			inEpoch(1, acq(0, 3, 40)), inEpoch(1, wr(0, 3, 41, 45, 2, "ok")), rel(0, 3, 46)},
		{acq(1, 1001, 20), wr(1, 1001, 21, 25, 1, "ok"), rel(1, 1001, 26),
			inEpoch(1, acq(1, 5, 50)), inEpoch(1, wr(1, 5, 51, 55, 3, "ok")), rel(1, 5, 56)},
	}
	if c := check(evs, 4, 100); c.StaleAccepts != 0 || c.Accepted != 4 {
		t.Fatalf("accepted %d, stale accepts %d; want 4 and 0 (the epoch-1 writes outrank the epoch-0 ones)", c.Accepted, c.StaleAccepts)
	}
}

// TestCheckOldEpochWriteIsStale: a holder of the old deployment (epoch 0)
// whose write commits after one at the new epoch committed slipped past
// the fence, however large its token: the move is meant to fence out every
// old holder at once.
func TestCheckOldEpochWriteIsStale(t *testing.T) {
	evs := [][]Event{
		{acq(0, 1000, 10), wr(0, 1000, 11, 35, 1, "ok")},
		{inEpoch(1, acq(1, 3, 20)), inEpoch(1, wr(1, 3, 21, 25, 0, "ok")), rel(1, 3, 26)},
	}
	if c := check(evs, 2, 100); c.StaleAccepts != 1 {
		t.Fatalf("stale accepts = %d, want 1 (epoch 0 token 1000 after epoch 1 token 3 committed)", c.StaleAccepts)
	}
}

// TestCheckEqualTokenInAnotherEpochIsNotRepeated: two backends may hand out
// the same number; at different epochs they are different fences, so a
// second holder writing with it is not a token handed out twice.
func TestCheckEqualTokenInAnotherEpochIsNotRepeated(t *testing.T) {
	by := func(e Event, holder string) Event { e.Holder = holder; return e }
	evs := [][]Event{
		{acq(0, 7, 10), by(wr(0, 7, 11, 15, 0, "ok"), "a"), rel(0, 7, 16)},
		{inEpoch(1, acq(1, 7, 20)), by(inEpoch(1, wr(1, 7, 21, 25, 1, "ok")), "b"), rel(1, 7, 26)},
	}
	if c := check(evs, 2, 100); c.StaleAccepts != 0 {
		t.Fatalf("stale accepts = %d, want 0 (token 7 at epochs 0 and 1 are two fences)", c.StaleAccepts)
	}
}

// TestSupersededRefusals: beyond the claim, a refusal while the lease stood
// is the fence's job only if a larger token was granted to another holder
// after that lease's grant and before the write; the resumed targeted
// holder and a later holder superseded in turn are both excused, a refusal
// with no larger grant before it is not.
func TestSupersededRefusals(t *testing.T) {
	refused := func(w int, tok, t int64) Event {
		e := wr(w, tok, t-1, t, 0, "stale")
		e.Valid = true
		return e
	}
	evs := [][]Event{
		// the targeted holder (token 5), superseded at 20 by token 7
		{acq(0, 5, 10), refused(0, 5, 30), rel(0, 5, 31)},
		// the second holder (token 7), superseded in turn at 40 by token 9
		{acq(1, 7, 20), refused(1, 7, 45), rel(1, 7, 46)},
		// token 9: refused with no larger grant since its own (at 40)
		{acq(2, 9, 40), refused(2, 9, 50), rel(2, 9, 51)},
	}
	n, targeted := supersededRefusals(evs, 5)
	if n != 2 || targeted != 1 {
		t.Fatalf("excused %d refusals (%d of the targeted token); want 2 and 1", n, targeted)
	}
	// The targeted holder refused before any larger grant: not excused.
	evs[0] = []Event{acq(0, 5, 10), refused(0, 5, 15), rel(0, 5, 16)}
	if n, _ := supersededRefusals(evs, 5); n != 1 {
		t.Fatalf("excused %d refusals; want 1 (only token 7's)", n)
	}
}

// TestSupersededRefusalsByLargerEpoch: a holder superseded by a grant at a
// raised epoch is refused by the fence as designed, though the new grant's
// token is smaller: the epoch decides.
func TestSupersededRefusalsByLargerEpoch(t *testing.T) {
	refused := wr(0, 5, 29, 30, 0, "stale")
	refused.Valid = true
	evs := [][]Event{
		{acq(0, 5, 10), refused, rel(0, 5, 31)},
		{inEpoch(1, acq(1, 2, 20)), rel(1, 2, 26)},
	}
	if n, targeted := supersededRefusals(evs, 5); n != 1 || targeted != 1 {
		t.Fatalf("excused %d refusals (%d of the targeted token); want 1 and 1 (epoch 1 token 2 outranks epoch 0 token 5)", n, targeted)
	}
}

func TestCheckNamesTheOverlap(t *testing.T) {
	// Worker 0's loss notice comes 30 ms after worker 1's grant, and its
	// process stalled 25 ms meanwhile: the detail says both.
	ms := int64(time.Millisecond)
	evs := [][]Event{
		{acq(0, 1, 10*ms), {Worker: 0, Ev: "stall", T0: 20 * ms, T: 45 * ms}, lostAt(0, 1, 60*ms), rel(0, 1, 61*ms)},
		{acq(1, 2, 30*ms), rel(1, 2, 80*ms)},
	}
	c := check(evs, 0, 100*ms)
	want := "worker 0 (token 1) believed it held for 30ms after worker 1 (token 2) was granted, until its loss notice; worker 0's process stalled 25ms"
	if c.Overlaps != 1 || !strings.Contains(c.OverlapDetail, want) {
		t.Errorf("overlaps %d, detail %q; want one, naming %q", c.Overlaps, c.OverlapDetail, want)
	}
	if c := check(evs[1:], 0, 100*ms); c.OverlapDetail != "" {
		t.Errorf("no overlap, but a detail: %q", c.OverlapDetail)
	}
}
