package main

import "syscall"

// holderProcAttr makes the kernel kill a crash-test holder if bench dies,
// so that no holder outlives the run.
func holderProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
