// Package matrixfile is the JSON form of a fault-matrix run: the rows of
// cmd/internal/faults' TestMatrix, written when FAULTS_JSON (or -faults.json) is
// set, and read by `distlock compare --faults`. It has no dependency on the
// harness, so the distlock command can read the file without linking servers
// or the testing package.
package matrixfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
)

// Version is the format version this package writes and reads.
const Version = 1

// Command is the command that writes a short (CI) matrix's file to path,
// run from the repository root; add -faults.long for the long matrix.
func Command(path string) string {
	return "FAULTS_JSON=" + path + " go test ./cmd/internal/faults -run Matrix -count=1"
}

// Header describes the run that produced the rows.
type Header struct {
	Version int `json:"version"`
	// Matrix is "short" (the CI matrix), "long" (-faults.long) or "soak"
	// (make soak: randomized schedules, see Row's Seeds…WorstRecoveryMs).
	Matrix string    `json:"matrix"`
	Date   time.Time `json:"date"` // when the run started
	// Duration is the run's wall time, as text and in seconds.
	Duration  string  `json:"duration"`
	DurationS float64 `json:"duration_s"`
	// Passed is true when every assertion of TestMatrix held in this run
	// (each row's Failed says which cells failed otherwise).
	Passed    bool   `json:"passed"`
	Host      string `json:"host,omitempty"`
	Cores     int    `json:"cores,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
	Commit    string `json:"commit,omitempty"` // git HEAD of the tree tested, "+dirty" if modified; best effort
	// Cell parameters: workers per cell, time run after the fault, TTL.
	Workers    int     `json:"workers"`
	AfterFault string  `json:"after_fault"`
	TTLMs      float64 `json:"ttl_ms"`
	// Skipped lists the backends the run left out, with the reason.
	Skipped []string `json:"skipped,omitempty"`
}

// File is a fault-matrix run.
type File struct {
	Header
	Rows []Row `json:"rows"`
}

// Row is one backend × fault × mode cell.
type Row struct {
	// Backend is the harness's deployment name: redis, redis-aof, redlock,
	// redlock5, etcd, etcd3, zookeeper, zookeeper3.
	Backend string `json:"backend"`
	// Family is the backend's declared name (Guarantees.Backend): redis,
	// redlock, etcd, zookeeper — what distlock compare groups by.
	Family string `json:"family"`
	Fault  string `json:"fault"`
	Mode   string `json:"mode"` // guarded or unguarded
	// Ops are writes attempted; Accepted committed; Rejected refused by the
	// fence; Uncertain of unknown outcome.
	Ops       int `json:"ops"`
	Accepted  int `json:"accepted"`
	Rejected  int `json:"rejected"`
	Uncertain int `json:"uncertain"`
	// LegitRejected are the rejected writes whose lease still stood (not
	// ended, deadline not passed): legitimate writes refused, a liveness
	// failure. Absent from files written before it was recorded.
	LegitRejected int `json:"legit_rejected"`
	Acquires      int `json:"acquires"`
	// AcquireErrors are failed Acquire calls (e.g. while a server was down).
	AcquireErrors int `json:"acquire_errors"`
	// Overlaps are pairs of leases whose belief intervals intersect.
	Overlaps      int   `json:"overlaps"`
	LostUpdates   int64 `json:"lost_updates"`
	StaleAccepted int   `json:"stale_accepted"`
	// Linearizable is porcupine's verdict: ok, illegal or unknown.
	Linearizable string `json:"linearizable"`
	// DoneAfterMs is how long after the resume (holder pause) or the fault's
	// start (link fault, clock jump) the targeted lease's Done closed; nil
	// when not seen or not applicable.
	DoneAfterMs *float64 `json:"done_after_ms"`
	// LongestWaitMs is the longest time without a new grant from the
	// fault's start on; nil when nothing was granted after it.
	LongestWaitMs *float64 `json:"longest_wait_ms"`
	// BoundMs is TTL + one renewal interval, the promise for DoneAfterMs
	// under a holder pause.
	BoundMs float64 `json:"bound_ms"`
	// What this deployment declares (its Guarantees) on the points the
	// faults test.
	FailuresTolerated int    `json:"failures_tolerated"`
	RestartLosesLocks bool   `json:"restart_loses_locks"`
	ClockDependent    bool   `json:"clock_dependent"`
	Note              string `json:"note,omitempty"`
	Broken            string `json:"broken,omitempty"` // a violation the fault itself saw
	// Failed is true when an assertion on this cell failed.
	Failed bool `json:"failed"`

	// Randomized runs (Matrix "soak"; Fault is "random", Mode "within" or
	// "beyond" the declared tolerance). Absent from matrix files.
	// Workload is "" for the lock workload (acquire, write, release) and
	// "election" for candidates of package election that write while they
	// lead, with an observer (rule f-observe).
	Workload string `json:"workload,omitempty"`
	// Seeds are the schedules' seeds, each reproducible with -random.seed.
	Seeds []uint64 `json:"seeds,omitempty"`
	// FaultsByKind counts the faults injected, by kind.
	FaultsByKind map[string]int `json:"faults_by_kind,omitempty"`
	// Violations counts, by rule, the breaks of rules the mode claims
	// (within: a–e; beyond: c and b); Counted every rule's breaks, claimed
	// or not (beyond: the lost-liveness cases).
	Violations map[string]int `json:"violations,omitempty"`
	Counted    map[string]int `json:"counted,omitempty"`
	// WorstLossNoticeMs is the longest a superseded lease's Done stayed open
	// after another holder's grant (in the time its holder ran: pauses left out);
	// WorstRecoveryMs the longest from a fault's end to the next grant.
	WorstLossNoticeMs *float64 `json:"worst_loss_notice_ms,omitempty"`
	WorstRecoveryMs   *float64 `json:"worst_recovery_ms,omitempty"`
}

// Ms converts d to milliseconds, or nil when d is negative ("not seen").
func Ms(d time.Duration) *float64 {
	if d < 0 {
		return nil
	}
	v := math.Round(float64(d)/float64(time.Microsecond)) / 1000 // µs resolution is plenty
	return &v
}

// Write writes f as indented JSON to path, creating its directory.
func Write(path string, f *File) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ErrFormat is wrapped by Read's errors about the file's content.
var ErrFormat = errors.New("not a fault-matrix file")

// Read reads and checks a file Write wrote.
func Read(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrFormat, err)
	}
	switch {
	case f.Version != Version:
		return nil, fmt.Errorf("%s: %w: version %d, want %d", path, ErrFormat, f.Version, Version)
	case f.Matrix != "short" && f.Matrix != "long" && f.Matrix != "soak":
		return nil, fmt.Errorf("%s: %w: matrix %q, want short, long or soak", path, ErrFormat, f.Matrix)
	}
	for i, r := range f.Rows {
		if r.Backend == "" || r.Fault == "" || r.Mode == "" {
			return nil, fmt.Errorf("%s: %w: row %d lacks backend, fault or mode", path, ErrFormat, i)
		}
	}
	return &f, nil
}
