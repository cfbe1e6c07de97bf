//go:build !linux

package main

import "syscall"

// holderProcAttr: only Linux can tie a holder's life to bench's; elsewhere
// the holder gives up after its --max.
func holderProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
