package main

import (
	"math"
	"slices"
)

// Stat is a figure's spread over repeats.
type Stat struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// pct returns the p-th percentile (nearest rank) of xs.
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// spread is the min, median and max of runs (NaN for none).
func spread(runs []float64) Stat {
	if len(runs) == 0 {
		return Stat{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{s[0], m, s[len(s)-1]}
}
