//go:build !linux

package proc

import "syscall"

// detached is a process group of its own; without Pdeathsig outside
// Linux, a killed parent leaves the process running.
func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
