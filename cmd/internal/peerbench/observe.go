package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/internal/electbench"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// observeID is the observer-latency scenario's name in --scenarios.
const observeID = "observe"

// electSide is one election library (or one setting of distlock's) on a
// pair's servers, for the observer-latency scenario.
type electSide struct {
	name      string
	reference bool // etcd's concurrency.Election: the row the others are read against
	// open returns a client of role with its own connections, and how to
	// close them.
	open func(ctx context.Context, addrs []string, role string) (electbench.Elector, func() error, error)
}

// electSides are the rows of pair p in the observer-latency scenario:
// distlock with its defaults; on the polling backends (redis, redlock) also
// with the observer's back-off set to bo (unless zero); on etcd, etcd's own
// concurrency.Election. Neither redis's, Redlock's nor ZooKeeper's peer
// library offers an election: there the etcd row is the reference.
func electSides(p *pair, bo span) []electSide {
	sides := []electSide{distlockElect(p, span{})}
	switch p.id {
	case "redis", "redlock":
		if bo != (span{}) {
			sides = append(sides, distlockElect(p, bo))
		}
	case "etcd":
		sides = append(sides, electSide{name: "etcd concurrency.Election", reference: true, open: openEtcdElection})
	}
	return sides
}

// distlockElect opens a Locker per client with distlock.Open and the
// backend's defaults (TTL 30 s, auto-renewed by the election; back-off
// 5–500 ms). A non-zero bo is the observer's back-off instead (WithBackoff
// on Observe).
func distlockElect(p *pair, bo span) electSide {
	name := "distlock " + p.backend
	if p.id != p.backend {
		name = "distlock " + p.id // a variant, such as redis-race
	}
	var observeOpts []distlock.CallOption
	if bo != (span{}) {
		name += fmt.Sprintf(", Observe WithBackoff(%v, %v)", bo.min, bo.max)
		observeOpts = append(observeOpts, distlock.WithBackoff(bo.min, bo.max))
	}
	return electSide{name: name, open: func(ctx context.Context, addrs []string, role string) (electbench.Elector, func() error, error) {
		l, err := distlock.Open(ctx, p.url(addrs))
		if err != nil {
			return nil, nil, err
		}
		e, err := electbench.Distlock(l, role, observeOpts...)
		if err != nil {
			_ = l.Close()
			return nil, nil, err
		}
		return e, l.Close, nil
	}}
}

// etcd client/v3/concurrency.Election: one client and one Session (the
// library's default TTL, 60 s) per client; a new Election(session, prefix)
// per Campaign, Resign; the observer's Observe.

type etcdElector struct {
	sess *concurrency.Session
	pfx  string
}

func openEtcdElection(ctx context.Context, addrs []string, role string) (electbench.Elector, func() error, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 5 * time.Second, Logger: nopZap(), Context: ctx})
	if err != nil {
		return nil, nil, err
	}
	sess, err := concurrency.NewSession(cli)
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	closeAll := func() error { return errors.Join(sess.Close(), cli.Close()) }
	return etcdElector{sess: sess, pfx: "/peerbench-election/" + role}, closeAll, nil
}

func (e etcdElector) Campaign(ctx context.Context, value string) (func(context.Context) error, error) {
	el := concurrency.NewElection(e.sess, e.pfx)
	if err := el.Campaign(ctx, value); err != nil {
		return nil, err
	}
	return el.Resign, nil
}

func (e etcdElector) Observe(ctx context.Context, seen func(string)) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	ch := concurrency.NewElection(e.sess, e.pfx).Observe(ctx)
	value := func(r clientv3.GetResponse) (string, bool) {
		if len(r.Kvs) == 0 {
			return "", false
		}
		return string(r.Kvs[0].Value), true
	}
	return electbench.Follow(ch, cancel, value, seen), nil
}

// span is a range of durations: a hold, or a WithBackoff setting (zero:
// none).
type span struct{ min, max time.Duration }

// parseSpan reads MIN:MAX (0 <= MIN <= MAX; 0 < MIN for a back-off), or
// for a back-off "none" (the zero span).
func parseSpan(s string, backoff bool) (span, error) {
	if backoff && s == "none" {
		return span{}, nil
	}
	lo, hi, ok := strings.Cut(s, ":")
	var b span
	var err1, err2 error
	b.min, err1 = time.ParseDuration(lo)
	b.max, err2 = time.ParseDuration(hi)
	if !ok || err1 != nil || err2 != nil || b.min < 0 || b.max < b.min || backoff && b.min == 0 {
		if backoff {
			return span{}, fmt.Errorf("%q: want MIN:MAX, 0 < MIN <= MAX, or none", s)
		}
		return span{}, fmt.Errorf("%q: want MIN:MAX, 0 <= MIN <= MAX", s)
	}
	return b, nil
}

// observeRun is one run of one row.
type observeRun struct {
	Changes        int     `json:"changes"`
	Missed         int     `json:"missed"`
	ObserverFirst  int     `json:"observer_first"`
	ElectedP50Ms   float64 `json:"elected_to_notified_p50_ms"`
	ElectedP99Ms   float64 `json:"elected_to_notified_p99_ms"`
	HandoverP50Ms  float64 `json:"resign_to_notified_p50_ms"`
	HandoverP99Ms  float64 `json:"resign_to_notified_p99_ms"`
	ElectP50Ms     float64 `json:"resign_to_elected_p50_ms"`
	ElectP99Ms     float64 `json:"resign_to_elected_p99_ms"`
	elected, hando []time.Duration
	elect          []time.Duration
}

// ObserveCell is one row of the observer-latency table: every run, and the
// percentiles over all of the runs' changes together.
type ObserveCell struct {
	Pair      string       `json:"pair"`
	Backend   string       `json:"backend"`
	Side      string       `json:"side"`
	Reference bool         `json:"reference,omitempty"`
	Runs      []observeRun `json:"runs"`
	// Over all runs' changes:
	Changes       int     `json:"changes"`
	Missed        int     `json:"missed"`
	ObserverFirst int     `json:"observer_first"`
	ElectedP50Ms  float64 `json:"elected_to_notified_p50_ms"`
	ElectedP99Ms  float64 `json:"elected_to_notified_p99_ms"`
	HandoverP50Ms float64 `json:"resign_to_notified_p50_ms"`
	HandoverP99Ms float64 `json:"resign_to_notified_p99_ms"`
	ElectP50Ms    float64 `json:"resign_to_elected_p50_ms"`
	ElectP99Ms    float64 `json:"resign_to_elected_p99_ms"`
}

// measureObserve opens the two candidates and the observer of s on a role
// of its own and runs one measurement.
func measureObserve(ctx context.Context, s electSide, addrs []string, c config) (observeRun, error) {
	role := keyName("pb", observeID, randHex(4))
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var es []electbench.Elector
	for range 3 {
		e, closeFn, err := s.open(octx, addrs, role)
		if err != nil {
			return observeRun{}, fmt.Errorf("open: %w", err)
		}
		defer closeFn()
		es = append(es, e)
	}
	r, err := electbench.Run(ctx, es[0], es[1], es[2], electbench.Config{Duration: c.duration,
		HoldMin: c.observeHold.min, HoldMax: c.observeHold.max, MinChanges: 20})
	if err != nil {
		return observeRun{}, err
	}
	return observeRun{
		Changes: r.Changes, Missed: r.Missed, ObserverFirst: r.ObserverFirst,
		ElectedP50Ms: ms(percentile(r.Elected, 50)), ElectedP99Ms: ms(percentile(r.Elected, 99)),
		HandoverP50Ms: ms(percentile(r.Handover, 50)), HandoverP99Ms: ms(percentile(r.Handover, 99)),
		ElectP50Ms: ms(percentile(r.Elect, 50)), ElectP99Ms: ms(percentile(r.Elect, 99)),
		elected: r.Elected, hando: r.Handover, elect: r.Elect,
	}, nil
}

// benchObserve runs the observer-latency rows of p, interleaved run by run.
func benchObserve(ctx context.Context, c config, p *pair, addrs []string) ([]*ObserveCell, []string) {
	sides := electSides(p, c.observeBackoff)
	cells := make([]*ObserveCell, len(sides))
	for i, s := range sides {
		cells[i] = &ObserveCell{Pair: p.id, Backend: p.backend, Side: s.name, Reference: s.reference}
	}
	var errs []string
	failed := make([]bool, len(sides))
	for r := range c.runs {
		for i, s := range sides {
			if ctx.Err() != nil {
				return nil, errs
			}
			if failed[i] {
				continue
			}
			c.note("%-24s %-30s run %d/%d  %s", p.title, "observer latency", r+1, c.runs, s.name)
			m, err := measureObserve(ctx, s, addrs, c)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s, observer latency, %s: %v", p.title, s.name, err))
				failed[i] = true
				continue
			}
			cells[i].Runs = append(cells[i].Runs, m)
		}
	}
	var out []*ObserveCell
	for i, cl := range cells {
		if !failed[i] {
			cl.summarize()
			out = append(out, cl)
		}
	}
	return out, errs
}

func (cl *ObserveCell) summarize() {
	var el, ho, ec []time.Duration
	cl.Changes, cl.Missed, cl.ObserverFirst = 0, 0, 0
	for _, r := range cl.Runs {
		cl.Changes += r.Changes
		cl.Missed += r.Missed
		cl.ObserverFirst += r.ObserverFirst
		el = append(el, r.elected...)
		ho = append(ho, r.hando...)
		ec = append(ec, r.elect...)
	}
	cl.ElectedP50Ms, cl.ElectedP99Ms = ms(percentile(el, 50)), ms(percentile(el, 99))
	cl.HandoverP50Ms, cl.HandoverP99Ms = ms(percentile(ho, 50)), ms(percentile(ho, 99))
	cl.ElectP50Ms, cl.ElectP99Ms = ms(percentile(ec, 50)), ms(percentile(ec, 99))
}

// observeTable is the observer-latency table, one row per library and
// setting, the etcd reference marked.
func observeTable(rep *Report) [][]string {
	rows := [][]string{{"backend", "library", "elected→notified p50 ms", "p99 ms", "resign→notified p50 ms", "p99 ms", "resign→elected p50 ms", "p99 ms", "changes", "missed", "observer first"}}
	for _, c := range rep.Observe {
		name := c.Side
		if c.Reference {
			name += " (reference)"
		}
		rows = append(rows, []string{c.Backend, name,
			fmt.Sprintf("%.2f", c.ElectedP50Ms), fmt.Sprintf("%.2f", c.ElectedP99Ms),
			fmt.Sprintf("%.2f", c.HandoverP50Ms), fmt.Sprintf("%.2f", c.HandoverP99Ms),
			fmt.Sprintf("%.2f", c.ElectP50Ms), fmt.Sprintf("%.2f", c.ElectP99Ms),
			fmt.Sprint(c.Changes), fmt.Sprint(c.Missed), fmt.Sprint(c.ObserverFirst)})
	}
	return rows
}
