package distlock_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// The compiler keeps options where they apply: testdata/misplaced passes
// three where they do not, and each of its lines marked "want" must be a
// compile error, not a run-time one.
func TestMisplacedOptionsDoNotCompile(t *testing.T) {
	const dir = "testdata/misplaced"
	f, err := os.Open(dir + "/main.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []int
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if strings.Contains(sc.Text(), "// want:") {
			want = append(want, n)
		}
	}
	if len(want) != 3 {
		t.Fatalf("%d lines marked want in %s, expected 3", len(want), dir)
	}
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
	if err == nil {
		t.Fatalf("%s compiled; every misplaced option should be an error", dir)
	}
	for _, n := range want {
		if !strings.Contains(string(out), "main.go:"+strconv.Itoa(n)+":") {
			t.Errorf("no compile error on line %d of %s/main.go:\n%s", n, dir, out)
		}
	}
	if strings.Count(string(out), "main.go:") != len(want) {
		t.Errorf("compile errors other than the %d wanted:\n%s", len(want), out)
	}
}
