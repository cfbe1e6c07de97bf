package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/internal/faults/matrixfile"
)

const faultsFixture = "testdata/faults.json"

// TestCompareFaultsFile runs compare with a fault-matrix fixture and checks
// the section in the text, JSON and HTML reports.
func TestCompareFaultsFile(t *testing.T) {
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")
	url, _ := memURL(t)
	r := runCLI(t, "compare", "-q", "--url", url, "--measure", "uncontended", "--duration", "20ms", "--repeat", "1",
		"--dir", dir, "--faults", faultsFixture, "--json", jsonPath, "--html", htmlPath)
	if r.code != 0 {
		t.Fatalf("code %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"Fault matrix: short (CI) matrix of 2026-11-22 07:40 UTC", "SOME ASSERTIONS FAILED",
		"fixture-host (not this report's host)", "read from " + faultsFixture,
		"not run: zookeeper: skipped",
		"== memory ==", "no fault-matrix rows for this backend",
		"== redis ==", "not measured in this report", "pause-holder", "illegal",
		"redis-aof", "kill-restart-server", // no family in the file: mapped by name
		"== etcd ==", "etcd3", "lose-minority", "FAIL",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "no rows in this report") {
		t.Errorf("text report says the rows are missing:\n%s", r.stdout)
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	fm := rep.FaultMatrix
	if fm == nil || fm.Header == nil || fm.Matrix != "short" || fm.Passed || len(fm.Unmatched) != 4 || fm.Missing != "" {
		t.Fatalf("JSON fault_matrix: %s", b)
	}

	h, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h2>Fault matrix</h2>", "<h3>redis</h3>", "<td>redis-aof</td>", "<h3>etcd</h3>"} {
		if !bytes.Contains(h, []byte(want)) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

// TestCompareFaultsGrouped checks that a measured backend's declared
// guarantees, headline figures and fault rows are printed together, and
// that rows of deployment variants (redis-aof, etcd3) join their backend.
func TestCompareFaultsGrouped(t *testing.T) {
	f, err := matrixfile.Read(faultsFixture)
	if err != nil {
		t.Fatal(err)
	}
	p50 := &Figure{Group: "uncontended", Name: "p50", Unit: "ms", Runs: []float64{0.25}, Stat: Stat{0.25, 0.25, 0.25}}
	rep := &Report{Kind: "compare", Backends: []*BackendResult{
		{URL: "redis://127.0.0.1:1", Backend: "redis", Figures: []*Figure{p50},
			Guarantees: distlock.Guarantees{Backend: "redis", TokenSource: "INCR", RestartLosesLocks: true}},
		{URL: "etcd://127.0.0.1:2", Backend: "etcd", Guarantees: distlock.Guarantees{Backend: "etcd", TokenSource: "revision"}},
	}}
	attachFaults(rep, f, faultsFixture)
	if len(rep.FaultMatrix.Unmatched) != 0 || len(rep.Backends[0].FaultRows) != 3 || len(rep.Backends[1].FaultRows) != 1 {
		t.Fatalf("rows not grouped: unmatched %d, redis %d, etcd %d",
			len(rep.FaultMatrix.Unmatched), len(rep.Backends[0].FaultRows), len(rep.Backends[1].FaultRows))
	}
	var w bytes.Buffer
	writeFaultText(&w, rep)
	text := w.String()
	_, redis, ok := strings.Cut(text, "== redis ==")
	if !ok {
		t.Fatalf("no redis group:\n%s", text)
	}
	redis, etcd, ok := strings.Cut(redis, "== etcd ==")
	if !ok {
		t.Fatalf("no etcd group after redis:\n%s", text)
	}
	for _, want := range []string{
		"declared (redis://127.0.0.1:1): token source INCR", "restart loses locks yes",
		"measured: uncontended p50 0.25 ms", "redis-aof (failures tolerated 0, restart loses locks no",
		"pause-holder", "kill-restart-server",
	} {
		if !strings.Contains(redis, want) {
			t.Errorf("redis group lacks %q:\n%s", want, redis)
		}
	}
	for _, want := range []string{"declared (etcd://127.0.0.1:2): token source revision", "etcd3 (failures tolerated 1", "lose-minority"} {
		if !strings.Contains(etcd, want) {
			t.Errorf("etcd group lacks %q:\n%s", want, etcd)
		}
	}
}

// TestCompareFaultsMissing checks the message that says how to produce the
// file when there is none, and that a --faults file that cannot be read
// stops compare before it measures anything.
func TestCompareFaultsMissing(t *testing.T) {
	if _, err := os.Stat(defaultFaults); err == nil {
		t.Skipf("%s exists in the package directory", defaultFaults)
	}
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "r.json")
	url, _ := memURL(t)
	r := runCLI(t, "compare", "-q", "--url", url, "--measure", "uncontended", "--duration", "20ms", "--repeat", "1",
		"--dir", dir, "--json", jsonPath)
	if r.code != 0 {
		t.Fatalf("code %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	cmd := "FAULTS_JSON=reports/faults.json go test ./cmd/internal/faults -run Matrix -count=1"
	for _, want := range []string{"Fault matrix: no rows in this report", cmd} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "has not landed") {
		t.Errorf("text report still says the harness has not landed:\n%s", r.stdout)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.FaultMatrix == nil || !strings.Contains(rep.FaultMatrix.Missing, cmd) || rep.FaultMatrix.Header != nil {
		t.Errorf("JSON fault_matrix: %+v", rep.FaultMatrix)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version": 99, "matrix": "short"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "absent.json"), bad} {
		r := runCLI(t, "compare", "-q", "--url", url, "--faults", path)
		if r.code != exitFailure || !strings.Contains(r.stderr, path) || r.stdout != "" {
			t.Errorf("--faults %s: code %d, stdout %q, stderr %q", path, r.code, r.stdout, r.stderr)
		}
	}
	if _, err := matrixfile.Read(bad); !errors.Is(err, matrixfile.ErrFormat) {
		t.Errorf("version 99: %v, want ErrFormat", err)
	}
}

const soakFixture = "testdata/soak.json"

// TestCompareSoakFile runs compare with a soak fixture and checks the
// soak section (per backend: guarded ops, faults by kind, violations by
// rule, worst loss-notice delay, worst recovery) in the text, JSON and HTML
// reports, and that a file of the wrong kind is refused before measuring.
func TestCompareSoakFile(t *testing.T) {
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")
	url, _ := memURL(t)
	r := runCLI(t, "compare", "-q", "--url", url, "--measure", "uncontended", "--duration", "20ms", "--repeat", "1",
		"--dir", dir, "--faults", faultsFixture, "--soak", soakFixture, "--json", jsonPath, "--html", htmlPath)
	if r.code != 0 {
		t.Fatalf("code %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	text := r.stdout
	_, soak, ok := strings.Cut(text, "Randomized faults (make soak) of 2026-11-22 20:00 UTC")
	if !ok {
		t.Fatalf("text report has no soak section:\n%s", text)
	}
	for _, want := range []string{
		"took 30m5s, 124211 guarded operations in all", "SOME CLAIMED RULES BROKEN", "read from " + soakFixture,
		"== redis (soak) ==", "guarded ops", "worst loss notice", "worst recovery",
		"42 (drop-replies 12, pause-holder 30)", "812 ms", "1656 ms",
		"a-mutual-exclusion 4, d-recovery 2", "4012 ms",
		"== zookeeper (soak) ==", "zookeeper-clamped", "e-loss-notice 1", "FAIL",
		"== etcd (soak) ==", "etcd3",
	} {
		if !strings.Contains(soak, want) {
			t.Errorf("soak section lacks %q:\n%s", want, soak)
		}
	}
	// within before beyond, redis's rows together, the election
	// workload's row (first in the file) after the lock workload's.
	_, redis, _ := strings.Cut(soak, "== redis (soak) ==")
	redis, _, _ = strings.Cut(redis, "==")
	i, j, k := strings.Index(redis, "within"), strings.Index(redis, "beyond"), strings.Index(redis, "redis (election)  within")
	if i < 0 || j < i || k < j {
		t.Errorf("redis rows out of order:\n%s", soak)
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if s := rep.FaultMatrix.Soak; s == nil || s.Header == nil || s.Matrix != "soak" || len(s.Rows) != 5 || s.Source != soakFixture {
		t.Fatalf("JSON soak section: %s", b)
	}
	h, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h2>Randomized faults (soak)</h2>", `<table class="soak">`, "<td>zookeeper-clamped</td>", "<td>redis (election)</td>", "<td>e-loss-notice 1</td>", `<td class="err">FAIL</td>`} {
		if !bytes.Contains(h, []byte(want)) {
			t.Errorf("HTML lacks %q", want)
		}
	}

	// A matrix file given as --soak, or a soak file as --faults, is refused.
	for _, args := range [][]string{{"--soak", faultsFixture}, {"--faults", soakFixture}} {
		r := runCLI(t, append([]string{"compare", "-q", "--url", url, "--measure", "uncontended", "--duration", "20ms", "--repeat", "1", "--dir", dir}, args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "pass it with") {
			t.Errorf("%v: code %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// TestCompareSoakWithoutFaults checks that the soak section shows when
// there is no fault-matrix file, after the message saying how to get one.
func TestCompareSoakWithoutFaults(t *testing.T) {
	rep := reportFixture(t)
	attachFaults(rep, nil, "")
	s, err := matrixfile.Read(soakFixture)
	if err != nil {
		t.Fatal(err)
	}
	attachSoak(rep, s, soakFixture)
	var txt, h bytes.Buffer
	writeText(&txt, rep)
	if err := writeHTML(&h, rep); err != nil {
		t.Fatal(err)
	}
	missing, soak, ok := strings.Cut(txt.String(), "Randomized faults (make soak)")
	if !ok || !strings.Contains(missing, "Fault matrix: no rows in this report") || !strings.Contains(soak, "== redis (soak) ==") {
		t.Errorf("text report:\n%s", txt.String())
	}
	if !strings.Contains(h.String(), "<h2>Randomized faults (soak)</h2>") {
		t.Errorf("HTML report lacks the soak section")
	}
}
