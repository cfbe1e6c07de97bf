package testserver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// EtcdVersion names the version that scripts/setup.sh builds, since the
// tests look for the binary under that name.
func TestEtcdVersionMatchesSetup(t *testing.T) {
	const mod = "go.etcd.io/etcd/server/v3"
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "etcd-server", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "require" && f[1] == mod:
			got = append(got, f[2])
		case len(f) >= 2 && f[0] == mod:
			got = append(got, f[1])
		}
	}
	if len(got) != 1 || got[0] != EtcdVersion {
		t.Fatalf("scripts/etcd-server/go.mod requires %s %v; EtcdVersion is %s: change both together", mod, got, EtcdVersion)
	}
}

func TestEtcdBinaryLookup(t *testing.T) {
	gopath := t.TempDir()
	t.Setenv("GOPATH", gopath+string(filepath.ListSeparator)+t.TempDir()) // the first entry counts
	old := goEnvGOPATH
	goEnvGOPATH = func() string { return "" }
	t.Cleanup(func() { goEnvGOPATH = old })
	exe := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// $DISTLOCK_ETCD wins, and must name an executable.
	own := exe(filepath.Join(t.TempDir(), "my-etcd"))
	t.Setenv(EtcdBinaryEnv, own)
	if got, err := etcdBinary(); err != nil || got != own {
		t.Errorf("with %s=%s: etcdBinary() = %q, %v", EtcdBinaryEnv, own, got, err)
	}
	t.Setenv(EtcdBinaryEnv, filepath.Join(gopath, "nonexistent"))
	if _, err := etcdBinary(); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), EtcdBinaryEnv) {
		t.Errorf("with %s naming no file: err = %v, want ErrMissing naming the variable", EtcdBinaryEnv, err)
	}
	t.Setenv(EtcdBinaryEnv, "")

	// Without the build, CI fails rather than run another etcd.
	built := filepath.Join(gopath, "bin", "distlock-etcd-"+EtcdVersion)
	t.Setenv("CI", "true")
	if _, err := etcdBinary(); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), built) {
		t.Errorf("CI without the build: err = %v, want ErrMissing naming %s", err, built)
	}
	// Elsewhere it falls back to another etcd, if there is one.
	t.Setenv("CI", "")
	if got, err := etcdBinary(); err == nil && strings.HasPrefix(got, gopath) || err != nil && !errors.Is(err, ErrMissing) {
		t.Errorf("without the build: etcdBinary() = %q, %v; want an etcd from PATH or /usr/bin, or ErrMissing", got, err)
	}

	// The build of scripts/setup.sh, in the bin directory of the first GOPATH entry.
	exe(built)
	if got, err := etcdBinary(); err != nil || got != built {
		t.Errorf("with the build: etcdBinary() = %q, %v, want %s", got, err, built)
	}
	if err := os.Chmod(built, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := etcdBinary(); got == built {
		t.Errorf("etcdBinary() returned %s, which is not executable", built)
	}
}
