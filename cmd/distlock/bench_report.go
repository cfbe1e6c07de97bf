package main

import (
	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

// Figure is one measured quantity of one backend.
type Figure struct {
	Group string    `json:"group"` // e.g. "contended k=8"
	Name  string    `json:"name"`  // e.g. "wait p99"
	Unit  string    `json:"unit"`  // "ms", "ops/s", "acq", "s"
	Runs  []float64 `json:"runs"`  // one value per successful repeat
	Stat  Stat      `json:"stat"`
}

// BackendResult is everything measured on one URL.
type BackendResult struct {
	URL        string              `json:"url"`
	Backend    string              `json:"backend"`
	Server     string              `json:"server"`
	Guarantees distlock.Guarantees `json:"guarantees"`
	Figures    []*Figure           `json:"figures"`
	Errors     []string            `json:"errors,omitempty"`
	// FaultRows are the fault-matrix rows of this backend (compare only).
	FaultRows []matrixfile.Row `json:"fault_rows,omitempty"`
	// Samples are latencies in ms by group, all repeats, for charts.
	Samples map[string][]float64 `json:"-"`
	// exit is the exit code its step errors call for (see stepFailed).
	exit int
}

// Report is one bench or compare run.
type Report struct {
	Kind     string           `json:"kind"`
	Args     []string         `json:"args"`
	Duration string           `json:"duration"`
	Repeat   int              `json:"repeat"`
	Env      Environment      `json:"environment"`
	Backends []*BackendResult `json:"backends"`
	Notes    []string         `json:"notes,omitempty"`
	Elapsed  string           `json:"elapsed"`
	// FaultMatrix is compare's fault-matrix section; its rows are in each
	// backend's FaultRows.
	FaultMatrix *FaultMatrix `json:"fault_matrix,omitempty"`
}

func (r *BackendResult) figure(group, name, unit string) *Figure {
	for _, f := range r.Figures {
		if f.Group == group && f.Name == name {
			return f
		}
	}
	f := &Figure{Group: group, Name: name, Unit: unit}
	r.Figures = append(r.Figures, f)
	return f
}
