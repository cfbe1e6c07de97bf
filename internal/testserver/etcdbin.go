package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// EtcdVersion is the etcd release the servers run: the version of
// go.etcd.io/etcd/server/v3 that scripts/etcd-server/go.mod requires (a test
// keeps the two equal). scripts/setup.sh builds it into
// $(go env GOPATH)/bin/distlock-etcd-<EtcdVersion>.
//
// Not Debian's etcd-server (3.4.23): a leader that stalls and resumes
// revokes leases that the new leader kept alive (etcd-io/etcd#15247). The
// fix (etcd-io/etcd#16822: 3.4.31, 3.5.13, 3.6.0) has the leader confirm its
// leadership before it revokes; from 3.4.34, 3.5.16 and 3.6.0 on it skips that check
// when the member ticked within the last three heartbeats
// (etcd-io/etcd#18428), which a member resuming from a pause (SIGSTOP, a
// frozen VM) has, so those releases still revoke, as 3.4.23 does, in a
// good share of such pauses. 3.5.15 is the newest release with the check
// intact; TestStalledLeaderKeepsLeases (module etcd) tells which a release
// is.
const EtcdVersion = "v3.5.15"

// EtcdBinaryEnv names the environment variable that, when set, is the path
// of the etcd binary to run instead of the build of scripts/setup.sh.
const EtcdBinaryEnv = "DISTLOCK_ETCD"

var (
	// goEnvGOPATH returns `go env GOPATH`, or "" if go cannot say.
	goEnvGOPATH = sync.OnceValue(func() string {
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	})

	fallbackOnce sync.Once
)

// etcdBinary returns the etcd binary to run: $DISTLOCK_ETCD if set, else the
// build of scripts/setup.sh. Without that build it falls back to an etcd in
// PATH or /usr/bin/etcd (Debian's), saying so once on stderr, except when
// CI is "true": CI runs the pinned version or fails.
func etcdBinary() (string, error) {
	if p := os.Getenv(EtcdBinaryEnv); p != "" {
		if !isExecFile(p) {
			return "", &missingError{fmt.Sprintf("%s=%s is not an executable file", EtcdBinaryEnv, p)}
		}
		return p, nil
	}
	built := etcdBuildPaths()
	for _, p := range built {
		if isExecFile(p) {
			return p, nil
		}
	}
	want := "etcd " + EtcdVersion + " (built by scripts/setup.sh into " + strings.Join(built, " or ") + ")"
	if len(built) == 0 {
		want = "etcd " + EtcdVersion + " (built by scripts/setup.sh into $(go env GOPATH)/bin; no GOPATH found)"
	}
	if os.Getenv("CI") == "true" {
		return "", &missingError{want + " not found"}
	}
	bin, err := lookBinary("etcd", "etcd", "/usr/bin/etcd")
	if err != nil {
		return "", &missingError{want + " not found, nor any other etcd"}
	}
	fallbackOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "testserver: %s not found; falling back to %s, which may lack fixes the tests rely on "+
			"(Debian's 3.4.23 lacks that of etcd-io/etcd#15247); run `make setup` to build it\n", want, bin)
	})
	return bin, nil
}

// etcdBuildPaths returns where scripts/setup.sh puts the etcd build:
// distlock-etcd-<EtcdVersion> in the bin directory of the first GOPATH entry,
// as `go env GOPATH` reports it. The environment's GOPATH (or Go's default,
// ~/go) comes first; `go env GOPATH`, which also reads the settings of
// `go env -w`, is asked only if the build is not there.
func etcdBuildPaths() []string {
	name := "distlock-etcd-" + EtcdVersion
	var paths []string
	add := func(gopath string) {
		first, _, _ := strings.Cut(gopath, string(filepath.ListSeparator))
		if first == "" {
			return
		}
		p := filepath.Join(first, "bin", name)
		for _, q := range paths {
			if q == p {
				return
			}
		}
		paths = append(paths, p)
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		add(gp)
	} else if home, err := os.UserHomeDir(); err == nil {
		add(filepath.Join(home, "go"))
	}
	if len(paths) == 1 && isExecFile(paths[0]) {
		return paths
	}
	add(goEnvGOPATH())
	return paths
}

// isExecFile reports whether p is a regular file that someone may execute.
func isExecFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
