package rdma

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// epollWaitHeld is epoll_wait(2) as a raw system call: the calling
// goroutine keeps its P and, to the Go scheduler, keeps running, so that
// sysmon never takes the P away from the sleeping engine (a take wakes an
// idle thread and resets sysmon to its fastest polling). Use it only for
// short, bounded waits: while it waits, its P runs nothing else and a
// stop-the-world (garbage collection) waits for it to return.
func epollWaitHeld(epfd int, events []unix.EpollEvent, ms int) (int, error) {
	var p unsafe.Pointer
	if len(events) > 0 {
		p = unsafe.Pointer(&events[0])
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p), uintptr(len(events)), uintptr(ms), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
