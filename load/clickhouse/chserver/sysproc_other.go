//go:build unix && !linux

package chserver

import "syscall"

// sysProcAttr puts the server in its own process group, so a Ctrl-C meant
// for fleetsync does not reach it before fleetsync has stopped it in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
