package postgres_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/distlock/distlock/internal/mutation"
)

// The lease-bound transaction tests see the bug of a WithLease that skips
// its lease checks: built with the mutation on, they fail.
func TestLeaseCheckMutationCaught(t *testing.T) {
	if mutation.Enabled {
		t.Skip("this is the mutant's run")
	}
	cmd := exec.Command("go", "test", "-count=1", "-tags", "distlock_mutations",
		"-run", "^TestWithLease$/^ExpiredBeforeAnyNewHolder$", ".")
	cmd.Env = append(os.Environ(), "DISTLOCK_MUTATION=lease-unchecked")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the tests pass with WithLease's checks removed:\n%s", out)
	}
	if !strings.Contains(string(out), "expired lease, no newer holder") {
		t.Fatalf("the mutant failed, but not on the lease check:\n%s", out)
	}
}
