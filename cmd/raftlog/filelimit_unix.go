//go:build unix

package main

import "syscall"

// openFileLimit is the process's soft limit on open files (0: unknown).
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}
