package electbench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/memory" // mem://
)

// TestRunMemory runs the measurement on the memory backend, whose Watch
// pushes every change: each change is seen, within far less than a
// second, and the hand-over is never shorter than the election.
func TestRunMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "mem://electbench-" + strings.ReplaceAll(t.Name(), "/", "-")
	var es []Elector
	for range 3 {
		l, err := distlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		e, err := Distlock(l, "role")
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	r, err := Run(ctx, es[0], es[1], es[2], Config{Duration: 200 * time.Millisecond, HoldMax: time.Millisecond, MinChanges: 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.Changes < 20 || r.Missed != 0 || len(r.Elected) != r.Changes || len(r.Handover) != r.Changes || len(r.Elect) != r.Changes {
		t.Fatalf("changes %d, missed %d, %d/%d/%d samples", r.Changes, r.Missed, len(r.Elected), len(r.Handover), len(r.Elect))
	}
	for i := range r.Elected {
		if r.Elected[i] > time.Second || r.Handover[i] < r.Elected[i] || r.Elect[i] <= 0 || r.Elect[i]+r.Elected[i] != r.Handover[i] {
			t.Errorf("change %d: elected→seen %v, resign→seen %v, resign→elected %v", i, r.Elected[i], r.Handover[i], r.Elect[i])
		}
	}
	t.Logf("%d changes, elected→seen p50 %v p99 %v, resign→seen p50 %v, observer first %d",
		r.Changes, Percentile(r.Elected, 50), Percentile(r.Elected, 99), Percentile(r.Handover, 50), r.ObserverFirst)
}

// fake is an election in this process whose observer hears of a leader
// lag after its Campaign returns, or never when lag < 0.
type fake struct {
	lead chan struct{} // a token: whoever takes it leads
	obs  chan string
	lag  time.Duration
}

type fakeClient struct{ f *fake }

func (c fakeClient) Campaign(ctx context.Context, v string) (func(context.Context) error, error) {
	select {
	case <-c.f.lead:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c.f.lag >= 0 {
		go func() { time.Sleep(c.f.lag); c.f.obs <- v }()
	}
	return func(context.Context) error { c.f.lead <- struct{}{}; return nil }, nil
}

func (c fakeClient) Observe(ctx context.Context, seen func(string)) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan string)
	go func() {
		defer close(ch)
		for {
			select {
			case v := <-c.f.obs:
				ch <- v
			case <-ctx.Done():
				return
			}
		}
	}()
	return Follow(ch, cancel, func(v string) (string, bool) { return v, true }, seen), nil
}

func newFake(lag time.Duration) fakeClient {
	f := &fake{lead: make(chan struct{}, 1), obs: make(chan string, 100), lag: lag}
	f.lead <- struct{}{}
	return fakeClient{f}
}

// TestRunMeasuresTheLag checks the figures on an observer told 20 ms after
// each election, and that one that is never told is counted as missing.
func TestRunMeasuresTheLag(t *testing.T) {
	ctx := context.Background()
	f := newFake(20 * time.Millisecond)
	began := time.Now()
	r, err := Run(ctx, f, f, f, Config{Duration: 100 * time.Millisecond, MinChanges: 5, HoldMin: 10 * time.Millisecond, HoldMax: 12 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(began); el < time.Duration(r.Changes+1)*30*time.Millisecond {
		t.Errorf("%d changes in %v: each leader should hold 20 ms for the observer and 10–12 ms more", r.Changes, el)
	}
	if p := Percentile(r.Elected, 50); r.Changes < 5 || p < 20*time.Millisecond || p > 200*time.Millisecond {
		t.Errorf("%d changes, p50 %v; want ≥ 5 and about 20ms", r.Changes, p)
	}
	if r.ObserverFirst != 0 || r.Missed != 0 {
		t.Errorf("observer first %d, missed %d", r.ObserverFirst, r.Missed)
	}

	deaf := newFake(-1)
	r, err = Run(ctx, deaf, deaf, deaf, Config{Duration: 10 * time.Millisecond, SeenTimeout: 5 * time.Millisecond, MinChanges: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Changes != 0 || r.Missed < 3 {
		t.Errorf("deaf observer: %d changes, %d missed; want 0 and ≥ 3", r.Changes, r.Missed)
	}
}

// TestRunReportsCampaignErrors: a candidate that cannot campaign ends the
// run with its error, and the other candidate is not left waiting.
func TestRunReportsCampaignErrors(t *testing.T) {
	f := newFake(0)
	<-f.f.lead // nobody can lead
	boom := errors.New("boom")
	bad := badClient{f, boom}
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), bad, f, f, Config{Duration: 10 * time.Millisecond})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Errorf("err %v, want boom", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after a campaign failed")
	}
}

type badClient struct {
	fakeClient
	err error
}

func (b badClient) Campaign(context.Context, string) (func(context.Context) error, error) {
	return nil, b.err
}

func TestPercentile(t *testing.T) {
	var xs []time.Duration
	for i := 1; i <= 100; i++ {
		xs = append(xs, time.Duration(i))
	}
	if Percentile(xs, 99) != 99 || Percentile(xs, 50) != 50 || Percentile(nil, 50) != 0 {
		t.Errorf("percentiles of 1..100: %v %v", Percentile(xs, 99), Percentile(xs, 50))
	}
}
