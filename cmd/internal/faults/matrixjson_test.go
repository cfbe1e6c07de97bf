package faults

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

// cell is a matrix row with what the JSON file adds: the deployment's
// declared guarantees and whether the cell's assertions failed.
type cell struct {
	Row
	Guarantees distlock.Guarantees
	Failed     bool
}

// writeMatrixJSON writes the run's rows to path (see -faults.json). A
// failure to write fails the test: the caller asked for the file.
func writeMatrixJSON(t *testing.T, path string, began time.Time, after time.Duration, cells []cell, skipped []string) {
	t.Helper()
	path = fromRepoRoot(path)
	el := time.Since(began).Round(time.Second)
	f := &matrixfile.File{Header: matrixfile.Header{
		Version: matrixfile.Version, Matrix: "short", Date: began.UTC().Truncate(time.Second),
		Duration: el.String(), DurationS: el.Seconds(), Passed: !t.Failed(),
		Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Commit: gitHead(),
		Workers: cellWorkers, AfterFault: after.String(), TTLMs: float64(TTL / time.Millisecond),
		Skipped: skipped,
	}}
	if *long {
		f.Matrix = "long"
	}
	f.Host, _ = os.Hostname()
	// Backends run in parallel: group each one's rows, in the order they ran.
	cells = slices.Clone(cells)
	slices.SortStableFunc(cells, func(a, b cell) int { return strings.Compare(a.Backend, b.Backend) })
	for _, c := range cells {
		r := c.Row
		f.Rows = append(f.Rows, matrixfile.Row{
			Backend: r.Backend, Family: c.Guarantees.Backend, Fault: r.Fault, Mode: r.Mode,
			Ops: r.Writes, Accepted: r.Accepted, Rejected: r.Rejected, Uncertain: r.Uncertain, LegitRejected: r.LegitRejected,
			Acquires: r.Acquires, AcquireErrors: r.AcquireErrs, Overlaps: r.Overlaps,
			LostUpdates: r.LostUpdates, StaleAccepted: r.StaleAccepts, Linearizable: r.Linearizable,
			DoneAfterMs: matrixfile.Ms(r.DoneAfterResume), LongestWaitMs: matrixfile.Ms(r.Usable),
			BoundMs:           float64(r.Bound) / float64(time.Millisecond),
			FailuresTolerated: c.Guarantees.FailuresTolerated, RestartLosesLocks: c.Guarantees.RestartLosesLocks,
			ClockDependent: c.Guarantees.ClockDependent,
			Note:           r.Note, Broken: r.Broken, Failed: c.Failed,
		})
	}
	if err := matrixfile.Write(path, f); err != nil {
		t.Errorf("-faults.json: %v", err)
		return
	}
	t.Logf("wrote %d rows to %s", len(f.Rows), path)
}

// fromRepoRoot makes a relative path relative to the repository root: go
// test runs the test in the package directory, but the user typed the path
// at the root (FAULTS_JSON=reports/faults.json go test ./cmd/internal/faults).
// The root is the nearest directory up with a go.work (this package's module,
// cmd/, is not the root); without one, the nearest with a go.mod.
func fromRepoRoot(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	dir, err := os.Getwd()
	if err != nil {
		return path
	}
	modRoot := ""
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return filepath.Join(d, path)
		}
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && modRoot == "" {
			modRoot = d
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if modRoot == "" {
		return path
	}
	return filepath.Join(modRoot, path)
}

// gitHead is the tested tree's commit, "+dirty" when it has changes; "" when
// git is not available.
func gitHead() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	head := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		head += "+dirty"
	}
	return head
}
