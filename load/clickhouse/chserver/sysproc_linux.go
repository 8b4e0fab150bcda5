//go:build linux

package chserver

import "syscall"

// sysProcAttr puts the server in its own process group, so a Ctrl-C meant
// for fleetsync does not reach it before fleetsync has stopped it in order,
// and has the kernel kill it if the thread that started it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
