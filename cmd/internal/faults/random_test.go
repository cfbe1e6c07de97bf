package faults

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"math/rand/v2"
)

var (
	randomSeed = flag.Uint64("random.seed", envUint("FAULTS_SEED"), "seed of TestRandom's fresh run (0: a new one, printed; or FAULTS_SEED)")
	randomOnly = flag.String("random.backend", "", "run TestRandom on this backend only")
	randomLoad = flag.String("random.workload", "", "election: run TestRandom's within (seed 14) and beyond (-random.seed) runs with the election workload instead of the lock workload")
)

func envUint(name string) uint64 {
	n, _ := strconv.ParseUint(os.Getenv(name), 10, 64)
	return n
}

// randomBackends are the deployments the randomized runs use.
func randomBackends() []BackendSpec {
	var out []BackendSpec
	for _, b := range Backends() {
		switch b.Name {
		case "redis", "redlock", "etcd", "etcd3", "zookeeper", "zookeeper3", "postgres":
			out = append(out, b)
		}
	}
	return append(out, zkClamped())
}

// zkClamped is ZooKeeper whose server grants less than the client asks
// for: maxSessionTimeout 1.5 s, the client asks 6 s.
func zkClamped() BackendSpec {
	return BackendSpec{Name: "zookeeper-clamped", Scheme: "zk", Start: startZKClamped(zkSession, 4*zkSession)}
}

// freshSeed is the seed of the one run per backend that is new each time.
func freshSeed(t *testing.T) uint64 {
	if *randomSeed != 0 {
		return *randomSeed
	}
	return rand.Uint64() >> 12 // short enough to type back
}

// TestRandom is CI's randomized run: on each backend a fixed-seed schedule
// within the declared tolerance (every rule claimed) and a fresh-seed one
// beyond it (only the guard and the token order claimed), a few seconds
// each, with the lock workload; then a fixed-seed schedule within the
// tolerance with the election workload (subtest election-within:
// candidates that lead for up to 1.5 s, writing all along, and an
// observer; the soak runs it beyond the tolerance too). A failure prints
// the seed; rerun it with -random.seed.
func TestRandom(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness needs Linux")
	}
	sh := Setup(t)
	fresh := freshSeed(t)
	t.Logf("fresh seed for the beyond-tolerance runs: %d (rerun: -random.seed %d)", fresh, fresh)
	for _, spec := range randomBackends() {
		if !Available(spec) || (*randomOnly != "" && spec.Name != *randomOnly) {
			continue
		}
		t.Run(spec.Name, func(t *testing.T) {
			t.Parallel()
			tg := spec.Start(t)
			runs := []struct {
				workload string
				mode     Mode
				seed     uint64
			}{{"", Within, 14}, {"", Beyond, fresh}, {WorkloadElection, Within, 17}}
			if *randomLoad != "" {
				runs = runs[:2]
				runs[0].workload, runs[1].workload = *randomLoad, *randomLoad
			}
			for _, run := range runs {
				name := string(run.mode)
				if run.workload != "" {
					name = run.workload + "-" + name
				}
				t.Run(name, func(t *testing.T) {
					row := RunRandom(t, sh, tg, RandomConfig{Mode: run.mode, Seed: run.seed, Workload: run.workload,
						Gen:    GenOptions{Warmup: 500 * time.Millisecond, Span: 4 * time.Second, MeanGap: 600 * time.Millisecond},
						Settle: 4 * time.Second})
					t.Log(row)
					judgeRow(t, row)
				})
			}
		})
	}
}

// judgeRow fails t on every violation of a rule the run's mode claims.
func judgeRow(t *testing.T, row RandomRow) {
	t.Helper()
	if row.Check.Acquires == 0 || row.Check.Writes == 0 {
		t.Errorf("no work done: %v", row)
	}
	if e := row.Election; e != nil && e.Observed == 0 {
		t.Errorf("the observer was told of no leader (Observe: %q): %v", e.ObserveErr, row)
	}
	for _, v := range row.Violations {
		t.Errorf("seed %d (%s): %v", row.Seed, row.Mode, v)
	}
}
