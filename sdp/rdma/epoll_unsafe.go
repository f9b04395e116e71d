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

// entersyscallblock and exitsyscall are the Go runtime's own entry and
// exit of a system call known to block (runtime/proc.go; kept stable for
// outside callers, go.dev/issue/67401): the entry hands the P off at once.
//
//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// epollWaitBlock is epoll_wait(2) for a long sleep: the calling goroutine
// gives its P up before it sleeps, as the runtime's own blocking waits
// do, rather than keeping it in the system call until sysmon takes it
// (after 10 ms, which sets sysmon polling every 20 µs on the next wake-up
// for as long as the P is not idle again: about 50 context switches per
// wake-up of an engine woken every 50 ms, against 5 this way). With every
// P idle, sysmon sleeps until the engine wakes, and sleeps again at its
// next look after the engine's next sleep.
//
//go:nosplit
//go:norace
func epollWaitBlock(epfd int, events []unix.EpollEvent, ms int) (int, error) {
	var p unsafe.Pointer
	if len(events) > 0 {
		p = unsafe.Pointer(&events[0])
	}
	entersyscallblock()
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p), uintptr(len(events)), uintptr(ms), 0, 0)
	exitsyscall()
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
