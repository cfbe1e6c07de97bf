package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock/internal/testserver"
)

// TestBenchMem runs every measurement briefly on mem:// and checks the
// table, the JSON and the HTML report.
func TestBenchMem(t *testing.T) {
	dir := t.TempDir()
	jsonPath, htmlPath, textPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html"), filepath.Join(dir, "r.txt")
	url, _ := memURL(t)
	r := runCLI(t, "compare", "-q", "--url", url, "--url", "mem://", "--duration", "50ms", "--repeat", "2",
		"--workers", "2,4", "--crash-ttl", "200ms", "--dir", dir,
		"--json", jsonPath, "--html", htmlPath, "--text", textPath)
	if r.code != 0 {
		t.Fatalf("code %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"uncontended", "contended k=4", "many keys", "hand-off hold=50ms", "observer latency", "elected→notified p99", "crash", "token source", "Fault matrix: no rows in this report", "loopback TCP round trip"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	text, err := os.ReadFile(textPath)
	if err != nil || string(text) != r.stdout {
		t.Errorf("--text file differs from stdout (%v)", err)
	}

	rep := readReport(t, jsonPath)
	if rep.Kind != "compare" || len(rep.Backends) != 2 || rep.Env.Cores < 1 || rep.Env.GoVersion == "" {
		t.Fatalf("report: kind %q, %d backends, env %+v", rep.Kind, len(rep.Backends), rep.Env)
	}
	for _, be := range rep.Backends {
		if len(be.Errors) > 0 {
			t.Errorf("%s: errors %v", be.URL, be.Errors)
		}
		groups := map[string]bool{}
		for _, f := range be.Figures {
			groups[f.Group] = true
			if len(f.Runs) != 2 {
				t.Errorf("%s %s %s: %d runs, want 2", be.URL, f.Group, f.Name, len(f.Runs))
			}
			if f.Stat.Min > f.Stat.Median || f.Stat.Median > f.Stat.Max {
				t.Errorf("%s %s %s: stat %+v not ordered", be.URL, f.Group, f.Name, f.Stat)
			}
		}
		if len(groups) != 9 { // uncontended, 2 contended, many keys, 3 hand-off, observer latency, crash
			t.Errorf("%s: groups %v, want 9", be.URL, groups)
		}
		if f := be.get(row{Group: "observer latency", Name: "changes"}); f == nil || f.Stat.Min < 10 {
			t.Errorf("%s: observer latency measured too few changes: %+v", be.URL, f)
		}
		if f := be.get(row{Group: "observer latency", Name: "missed"}); f == nil || f.Stat.Max != 0 {
			t.Errorf("%s: the observer missed leaders: %+v", be.URL, f)
		}
		if f := be.get(row{Group: "crash", Name: "free after"}); f == nil || f.Stat.Median <= 0 || f.Stat.Median > 10 {
			t.Errorf("%s: crash figure %+v", be.URL, f)
		}
	}

	h, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	html := string(h)
	if n := strings.Count(html, "<svg"); n < 4 {
		t.Errorf("HTML has %d charts, want 4", n)
	}
	for _, bad := range []string{"<script", "src=\"http", "href=\"http"} {
		if strings.Contains(html, bad) {
			t.Errorf("HTML is not self-contained: contains %q", bad)
		}
	}
}

// TestBenchHeld runs the held-leases measurement on mem:// with a few
// hundred leases: every figure present, no lease lost, no goroutine per
// lease, both acquire rates measured.
func TestBenchHeld(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	url, _ := memURL(t)
	r := runCLI(t, "bench", "-q", "--url", url, "--measure", "held", "--held", "400", "--repeat", "1",
		"--duration", "50ms", "--json", jsonPath)
	if r.code != 0 {
		t.Fatalf("code %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readReport(t, jsonPath)
	if len(rep.Backends) != 1 || len(rep.Backends[0].Errors) > 0 {
		t.Fatalf("backends %+v", rep.Backends)
	}
	be := rep.Backends[0]
	figure := func(name string) float64 {
		t.Helper()
		f := be.get(row{Group: "held n=400", Name: name})
		if f == nil {
			t.Fatalf("no figure %q in %+v", name, be.Figures)
		}
		return f.Stat.Median
	}
	if few, many := figure("acquire/s, 200 held"), figure("acquire/s, 400 held"); few <= 0 || many <= 0 {
		t.Errorf("acquire rates %v, %v", few, many)
	}
	if g := figure("goroutines per lease"); g >= 0.05 {
		t.Errorf("%v goroutines per held lease", g)
	}
	if n := figure("lost while renewing"); n != 0 {
		t.Errorf("%v leases lost while renewing", n)
	}
	if s := figure("release all (16 at once)"); s <= 0 {
		t.Errorf("release time %v", s)
	}
}

// TestBenchCrashProcess measures a crashed holder process on Redis: the
// holder is a real "distlock hold" process that gets SIGKILL.
func TestBenchCrashProcess(t *testing.T) {
	if !registered("redis") {
		t.Skip("redis:// is not registered in this build")
	}
	s := testserver.Redis(t)
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	r := runCLI(t, "bench", "-q", "--url", "redis://"+s.Addr()+"/0", "--measure", "crash,uncontended",
		"--duration", "50ms", "--repeat", "1", "--crash-ttl", "500ms", "--json", jsonPath)
	if r.code != 0 {
		t.Fatalf("code %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rep := readReport(t, jsonPath)
	f := rep.Backends[0].get(row{Group: "crash", Name: "free after"})
	if f == nil || len(f.Runs) != 1 {
		t.Fatalf("no crash figure: %+v", rep.Backends[0].Figures)
	}
	// The key frees when the dead holder's TTL runs out: not before a
	// renewal could have extended it, and long before a liveness bound.
	if f.Runs[0] <= 0 || f.Runs[0] > 10 {
		t.Errorf("free after %v s with a 500ms TTL", f.Runs[0])
	}
	if !strings.Contains(rep.Env.Servers[0], "redis 7") && !strings.Contains(rep.Env.Servers[0], "redis ") {
		t.Errorf("server version not recorded: %q", rep.Env.Servers[0])
	}
}

// readReport reads the JSON report a run wrote to path.
func readReport(t *testing.T, path string) Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	return rep
}

// TestBenchExitCodes: bench and compare exit by run's table: an
// unreachable backend is 69, not a measurement failure.
func TestBenchExitCodes(t *testing.T) {
	closed := closedAddr(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"bench", "--url", "redis://" + closed}, exitUnavailable},
		{[]string{"compare", "--url", "redis://" + closed}, exitUnavailable},
		{[]string{"bench", "--url", "etcd://" + closed}, exitUnavailable},
		{[]string{"bench", "--url", "redis://" + closed + "?bogus=1"}, exitUsage},
	} {
		args := append(tc.args, "-q", "--measure", "uncontended", "--duration", "50ms", "--repeat", "1", "--json", filepath.Join(t.TempDir(), "r.json"))
		r := runCLI(t, args...)
		if r.code != tc.code {
			t.Errorf("distlock %q: code %d, want %d\n%s", tc.args, r.code, tc.code, r.stderr)
		}
	}
}
