package mutation

import "testing"

func TestOffByDefault(t *testing.T) {
	if Enabled {
		t.Skip("built with distlock_mutations")
	}
	t.Setenv("DISTLOCK_MUTATION", "owner-reuse")
	if On("owner-reuse") || Pick("owner-reuse", 1, 2) != 2 || Dur("owner-reuse", 5) != 0 {
		t.Fatal("a normal build must carry no mutation")
	}
}
