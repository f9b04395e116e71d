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

// pollBlock is poll(2) of fds for up to ms (-1: no bound) for a
// goroutine that waits for the engine (a dial's answer): it gives its P
// up as it goes to sleep, as epollWaitBlock does. A plain system call
// keeps the P until sysmon takes it (after 10 ms, at once while the
// other P is busy), and each take sets sysmon polling every 20 µs
// again; a dial waits tens of ms.
//
//go:nosplit
//go:norace
func pollBlock(fds []unix.PollFd, ms int) (int, error) {
	var ts unix.Timespec
	tp := unsafe.Pointer(nil)
	if ms >= 0 {
		ts.Sec, ts.Nsec = int64(ms/1000), int64(ms%1000)*1e6
		tp = unsafe.Pointer(&ts)
	}
	entersyscallblock()
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(tp), 0, 0, 0)
	exitsyscall()
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
