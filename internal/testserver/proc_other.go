//go:build unix && !linux

package testserver

import "syscall"

// sysProcAttr puts the server in its own process group. (Only Linux can also
// tie its life to the test binary's.)
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// family returns root if it is alive. Without /proc the rest of the family is
// reached only through the process group signals.
func family(root int) []int {
	if alive(root) {
		return []int{root}
	}
	return nil
}

// alive reports whether pid exists (zombies included, which this portable check cannot tell apart).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// stopped cannot observe process states portably and assumes the SIGSTOP has arrived.
func stopped(pid int) bool { return true }
