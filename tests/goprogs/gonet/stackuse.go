package main

import (
	"fmt"
	"syscall"
)

// stackUse is in stackuse_amd64.s.
func stackUse(trap, a1, a2, a3 uintptr) uintptr

// printStackUse prints how many bytes below the caller's stack pointer a
// system call osf passes to the kernel (getpid) and one it hooks
// (getsockname, on fd -1: EBADF) write, through the same nosplit chain
// (syscall.RawSyscall6, then Syscall6).
func printStackUse() error {
	pass := stackUse(syscall.SYS_GETPID, 0, 0, 0)
	hooked := stackUse(syscall.SYS_GETSOCKNAME, ^uintptr(0), 0, 0)
	fmt.Printf("stackuse passthrough=%d hooked=%d\n", pass, hooked)
	return nil
}
