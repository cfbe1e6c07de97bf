package postgres_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock/internal/mutation"
)

// The tests see the bugs put back by the postgres mutations: the test
// binary built with -tags distlock_mutations fails each named test, with
// the message of the claim it breaks, when that mutation is on.
func TestMutationsCaught(t *testing.T) {
	t.Parallel()
	if mutation.Enabled {
		t.Skip("this is the mutant's run")
	}
	bin := filepath.Join(t.TempDir(), "postgres.test")
	if out, err := exec.Command("go", "test", "-c", "-tags", "distlock_mutations", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the mutant: %v\n%s", err, out)
	}
	for _, m := range []struct{ mutation, test, want string }{
		// WithLease without its checks commits an expired lease's write.
		{"lease-unchecked", "^TestWithLease$/^ExpiredBeforeAnyNewHolder$", "expired lease, no newer holder"},
		// Tokens from the row's counter alone fall back after a failover.
		{"pg-token-counter", "^TestFailoverToLaggingReplica$", "not above the lost grant's"},
	} {
		t.Run(m.mutation, func(t *testing.T) {
			cmd := exec.Command(bin, "-test.count=1", "-test.run", m.test)
			cmd.Env = append(os.Environ(), "DISTLOCK_MUTATION="+m.mutation)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s passes with %s on:\n%s", m.test, m.mutation, out)
			}
			if !strings.Contains(string(out), m.want) {
				t.Fatalf("the mutant failed, but not with %q:\n%s", m.want, out)
			}
		})
	}
}
