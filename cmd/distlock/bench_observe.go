package main

import (
	"context"
	"time"

	"github.com/distlock/distlock/cmd/internal/electbench"
)

// A leader of the observer measurement holds a random
// observeHoldMin..observeHoldMax once the observer has seen it: leaders
// hold for a while in real use, and etcd's watches from a past revision
// need up to 100 ms to catch up.
const observeHoldMin, observeHoldMax = 120 * time.Millisecond, 200 * time.Millisecond

// observe measures the observer latency of package election on key (the
// role): two Lockers hand leadership over while a third observes with the
// default settings. elected → notified is from the new leader's Campaign
// returning to the observer receiving it (negative when the observer hears
// first); resign → notified from the old leader's Resign call.
func observe(ctx context.Context, b *backend, key string) ([]value, []float64, error) {
	ls, err := b.lockersN(ctx, 3)
	if err != nil {
		return nil, nil, err
	}
	var es []electbench.Elector
	for _, l := range ls {
		e, err := electbench.Distlock(l, key)
		if err != nil {
			return nil, nil, err
		}
		es = append(es, e)
	}
	r, err := electbench.Run(ctx, es[0], es[1], es[2], electbench.Config{Duration: b.cfg.duration,
		HoldMin: observeHoldMin, HoldMax: observeHoldMax, MinChanges: 10})
	if err != nil {
		return nil, nil, err
	}
	lat := make([]float64, len(r.Elected))
	for i, d := range r.Elected {
		lat[i] = ms(d)
	}
	return []value{
		{"elected→notified p50", "ms", ms(electbench.Percentile(r.Elected, 50))},
		{"elected→notified p99", "ms", ms(electbench.Percentile(r.Elected, 99))},
		{"resign→notified p50", "ms", ms(electbench.Percentile(r.Handover, 50))},
		{"resign→notified p99", "ms", ms(electbench.Percentile(r.Handover, 99))},
		{"changes", "n", float64(r.Changes)},
		{"missed", "n", float64(r.Missed)},
	}, lat, nil
}
