package proc

import "syscall"

// detached is a process group of its own, and SIGKILL when the parent
// dies (Pdeathsig: strictly, when the thread that started it ends).
func detached() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
