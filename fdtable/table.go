package fdtable

/*
#include "fdtable.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sizes of the shared layout, from fdtable.h.
const (
	SizeofEntry  = C.OSF_FDT_ENTRY_BYTES
	SizeofHeader = C.OSF_FDT_HDR_BYTES
	ChunkEntries = C.OSF_FDT_CHUNK_ENTRIES
	MaxChunks    = C.OSF_FDT_MAX_CHUNKS
	Magic        = C.OSF_FDT_MAGIC
	Version      = C.OSF_FDT_VERSION
	Name         = C.OSF_FDT_NAME
)

// RawEntry and RawHeader are the C layouts.
type (
	RawEntry  = C.struct_osf_fdt_entry
	RawHeader = C.struct_osf_fdt_header
)

// Errors returned by Open.
var (
	// ErrNoTable means the process has no fd table: it never tracked a
	// socket (or is not under osf).
	ErrNoTable = errors.New("fdtable: no fd table")
	// ErrLayout means the table is not one this build understands.
	ErrLayout = errors.New("fdtable: unknown layout")
)

// Kind is what an fd is to osf (enum osf_fd_kind).
type Kind uint8

// The kinds of fd.
const (
	KindNone   Kind = C.OSF_FD_NONE
	KindHidden Kind = C.OSF_FD_HIDDEN
	KindReserved Kind = C.OSF_FD_RESERVED
	KindInet   Kind = C.OSF_FD_INET
	KindKernel Kind = C.OSF_FD_KERNEL
	KindEpoll  Kind = C.OSF_FD_EPOLL
	KindListen Kind = C.OSF_FD_LISTEN
	KindShm    Kind = C.OSF_FD_SHM
	KindRDMA   Kind = C.OSF_FD_RDMA
)

var kindNames = map[Kind]string{
	KindNone: "none", KindHidden: "osf", KindReserved: "reserved", KindInet: "tcp", KindKernel: "kernel",
	KindEpoll: "epoll", KindListen: "listen", KindShm: "shm", KindRDMA: "rdma",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Socket reports whether the fd is a TCP socket the application sees.
func (k Kind) Socket() bool { return k >= KindInet && k != KindEpoll }

// Transport is the transport recorded for a socket (enum osf_transport).
type Transport uint8

// The transports.
const (
	TransportNone   Transport = C.OSF_TP_NONE
	TransportKernel Transport = C.OSF_TP_KERNEL
	TransportShm    Transport = C.OSF_TP_SHM
	TransportRDMA   Transport = C.OSF_TP_RDMA
)

func (t Transport) String() string {
	switch t {
	case TransportKernel:
		return "kernel"
	case TransportShm:
		return "shm"
	case TransportRDMA:
		return "rdma"
	}
	return "-"
}

// Role is a socket's role (enum osf_role).
type Role uint8

// The roles.
const (
	RoleNone     Role = C.OSF_ROLE_NONE
	RoleClient   Role = C.OSF_ROLE_CLIENT
	RoleServer   Role = C.OSF_ROLE_SERVER
	RoleListener Role = C.OSF_ROLE_LISTENER
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleServer:
		return "server"
	case RoleListener:
		return "listener"
	}
	return "-"
}

// Entry is one fd's row of the table.
type Entry struct {
	FD          int
	Kind        Kind
	Transport   Transport
	Reason      uint8 // internal/policy.Reason
	Role        Role
	Flags       uint32
	AuxFD       int
	Rule        int
	ReasonErrno unix.Errno
	Local, Peer netip.AddrPort
}

// Header flags.
const (
	HeaderCoreLoaded = C.OSF_FDTH_CORE_LOADED
	HeaderDisabled   = C.OSF_FDTH_DISABLED
)

// Table is a snapshot of one process's fd table.
type Table struct {
	PID       int
	FD        int    // the table's fd number in its process
	Flags     uint32 // Header* flags
	CoreLoads uint64
	entries   []Entry
}

// Entries returns the tracked fds in fd order.
func (t *Table) Entries() []Entry { return t.entries }

// CoreLoaded reports whether the process has loaded the Go core.
func (t *Table) CoreLoaded() bool { return t.Flags&HeaderCoreLoaded != 0 }

// Find returns the fd number of pid's table by looking for its memfd among
// the process's fds; ErrNoTable when there is none.
func Find(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1, fmt.Errorf("fdtable: read %s: %w", dir, err)
	}
	want := "/memfd:" + Name + " (deleted)"
	for _, e := range ents {
		link, err := os.Readlink(dir + "/" + e.Name())
		if err != nil || link != want {
			continue
		}
		fd, err := strconv.Atoi(e.Name())
		if err == nil {
			return fd, nil
		}
	}
	return -1, ErrNoTable
}

// Open reads pid's table. It needs the same access as reading the
// process's /proc/PID/fd (same user, or root).
func Open(pid int) (*Table, error) {
	fd, err := Find(pid)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
	if err != nil {
		return nil, fmt.Errorf("fdtable: open table of %d: %w", pid, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("fdtable: stat table of %d: %w", pid, err)
	}
	if st.Size() < SizeofHeader {
		return nil, ErrLayout
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("fdtable: map table of %d: %w", pid, err)
	}
	defer unix.Munmap(m)
	t := &Table{PID: pid, FD: fd}
	if err := t.read(m); err != nil {
		return nil, err
	}
	return t, nil
}

// read copies the table out of its mapping, retrying while the owner
// changes it underneath.
func (t *Table) read(m []byte) error {
	h := (*RawHeader)(unsafe.Pointer(&m[0]))
	if uint64(h.magic) != Magic || h.version != Version || h.entry_bytes != SizeofEntry ||
		h.chunk_entries != ChunkEntries {
		return ErrLayout
	}
	for try := 0; try < 8; try++ {
		gen := loadGeneration(h)
		t.Flags = uint32(h.flags)
		t.CoreLoads = uint64(h.core_loads)
		t.entries = t.entries[:0]
		for i := 0; i < MaxChunks; i++ {
			if h.chunk_present[i] == 0 {
				continue
			}
			off := SizeofHeader + i*ChunkEntries*SizeofEntry
			if off+ChunkEntries*SizeofEntry > len(m) {
				continue
			}
			for j := 0; j < ChunkEntries; j++ {
				raw := (*RawEntry)(unsafe.Pointer(&m[off+j*SizeofEntry]))
				if raw.kind == C.OSF_FD_NONE {
					continue
				}
				t.entries = append(t.entries, decode(i*ChunkEntries+j, raw))
			}
		}
		if loadGeneration(h) == gen {
			break
		}
	}
	return nil
}

func decode(fd int, r *RawEntry) Entry {
	return Entry{
		FD:          fd,
		Kind:        Kind(r.kind),
		Transport:   Transport(r.transport),
		Reason:      uint8(r.reason),
		Role:        Role(r.role),
		Flags:       uint32(r.flags),
		AuxFD:       int(r.aux_fd),
		Rule:        int(r.rule),
		ReasonErrno: unix.Errno(r.reason_errno),
		Local:       sockaddr(r.local[:]),
		Peer:        sockaddr(r.peer[:]),
	}
}

// sockaddr decodes a sockaddr_in or sockaddr_in6 stored in a table entry.
func sockaddr(b []C.uint8_t) netip.AddrPort {
	raw := make([]byte, len(b))
	for i := range b {
		raw[i] = byte(b[i])
	}
	fam := uint16(raw[0]) | uint16(raw[1])<<8
	port := uint16(raw[2])<<8 | uint16(raw[3])
	switch fam {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[4:8])), port)
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(raw[8:24])), port)
	}
	return netip.AddrPort{}
}

// Procs lists the pids of processes that have libosf.so mapped, found in
// /proc/PID/maps; processes the caller may not inspect are skipped.
func Procs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("fdtable: read /proc: %w", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if HasLib(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// HasLib reports whether pid has libosf.so mapped.
func HasLib(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	return err == nil && strings.Contains(string(b), "/libosf.so")
}
