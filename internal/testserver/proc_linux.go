package testserver

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr puts the server in its own process group and has the kernel
// kill it if the test binary dies, so that an interrupted test run strands no
// servers. (Children of a server, such as PostgreSQL backends, exit by
// themselves when it dies.)
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

type procStat struct {
	state      byte // R, S, D, T, ...
	ppid, pgrp int
}

// readStat parses /proc/<pid>/stat; ok is false for processes that are gone
// or zombies (orphans are reparented to init, which need not reap them promptly).
func readStat(pid string) (st procStat, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return st, false
	}
	// "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || f[0][0] == 'Z' || f[0][0] == 'X' {
		return st, false
	}
	st.state = f[0][0]
	st.ppid, _ = strconv.Atoi(string(f[1]))
	st.pgrp, _ = strconv.Atoi(string(f[2]))
	return st, true
}

// family returns the live processes of a server: root, its process group
// and all its descendants. The descendants matter because PostgreSQL's
// backends call setsid and so leave the group.
func family(root int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	procs := map[int]procStat{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, ok := readStat(n); ok {
			procs[pid] = st
		}
	}
	in := map[int]bool{}
	if _, ok := procs[root]; ok {
		in[root] = true
	}
	for pid, st := range procs {
		if st.pgrp == root {
			in[pid] = true
		}
	}
	// Add children of members until nothing changes; process trees are shallow.
	for changed := true; changed; {
		changed = false
		for pid, st := range procs {
			if !in[pid] && in[st.ppid] {
				in[pid], changed = true, true
			}
		}
	}
	pids := make([]int, 0, len(in))
	for pid := range in {
		pids = append(pids, pid)
	}
	return pids
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	_, ok := readStat(strconv.Itoa(pid))
	return ok
}

// stopped reports whether pid is stopped, or gone.
func stopped(pid int) bool {
	st, ok := readStat(strconv.Itoa(pid))
	return !ok || st.state == 'T' || st.state == 't'
}
