package fdtable

/*
#include "fdtable.h"
*/
import "C"

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
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

// Ops is the operations table libosf.so dispatches an fd to (enum
// osf_ops_kind, preload/ops.h): its data calls and readiness.
type Ops uint8

// The operations tables.
const (
	OpsNone           Ops = C.OSF_OPS_NONE
	OpsShm            Ops = C.OSF_OPS_SHM
	OpsRDMA           Ops = C.OSF_OPS_RDMA
	OpsGatewayPending Ops = C.OSF_OPS_GW_PENDING
)

var opsNames = [...]string{OpsShm: "shm", OpsRDMA: "rdma", OpsGatewayPending: "gateway-pending"}

// String names the table as osfstat prints it ("" for none).
func (o Ops) String() string {
	if int(o) < len(opsNames) {
		return opsNames[o]
	}
	return "ops" + strconv.Itoa(int(o))
}

// Kind is what an fd is to osf (enum osf_fd_kind).
type Kind uint8

// The kinds of fd.
const (
	KindNone     Kind = C.OSF_FD_NONE
	KindHidden   Kind = C.OSF_FD_HIDDEN
	KindReserved Kind = C.OSF_FD_RESERVED
	KindInet     Kind = C.OSF_FD_INET
	KindKernel   Kind = C.OSF_FD_KERNEL
	KindEpoll    Kind = C.OSF_FD_EPOLL
	KindListen   Kind = C.OSF_FD_LISTEN
	KindShm      Kind = C.OSF_FD_SHM
)

var kindNames = map[Kind]string{
	KindNone: "none", KindHidden: "osf", KindReserved: "reserved", KindInet: "tcp", KindKernel: "kernel",
	KindEpoll: "epoll", KindListen: "listen", KindShm: "shm",
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
	// TransportGateway is a kernel TCP stream to an osfgw gateway that
	// relays it to the destination (Entry.Peer).
	TransportGateway Transport = C.OSF_TP_GATEWAY
)

func (t Transport) String() string {
	switch t {
	case TransportKernel:
		return "kernel"
	case TransportShm:
		return "shm"
	case TransportRDMA:
		return "rdma"
	case TransportGateway:
		return "gateway"
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

// FlagGateway marks an offloaded connection (kind KindShm) that is a
// stream to an osfgw gateway relaying to the peer (Entry.Peer, the
// destination); its Transport is the stream's own, shm or rdma.
const FlagGateway = C.OSF_FDF_GATEWAY

// Gateway reports whether the entry is an offloaded stream to a gateway.
func (e Entry) Gateway() bool { return e.Flags&FlagGateway != 0 }

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
	// Cause is, for reason "strict mode refused the fallback", the
	// fallback reason that was refused.
	Cause       uint8
	Local, Peer netip.AddrPort
	// Ino is the st_ino of the fd's file when libosf.so recorded it (for
	// offloaded connections and hidden fds; 0 otherwise).
	Ino uint64
	// OwnerFD is, for a hidden fd, the fd it serves; -1 for the table.
	OwnerFD int
	// RingBytes is the ring size of an offloaded connection, as agreed at
	// the handshake.
	RingBytes uint32
	// Slot is, for an shm connection whose rings are a slot of a region
	// (the default; not with OSF_SHM_POOL=0), its slot in the region AuxFD
	// is; -1 otherwise.
	Slot int
	// Ops is the operations table the hooks dispatch the fd to.
	Ops Ops
}

// Header flags.
const (
	HeaderCoreLoaded = C.OSF_FDTH_CORE_LOADED
	HeaderDisabled   = C.OSF_FDTH_DISABLED
	HeaderGo         = C.OSF_FDTH_GO
)

// Table is a snapshot of one process's fd table.
type Table struct {
	PID       int
	FD        int    // the table's fd number in its process
	Flags     uint32 // Header* flags
	CoreLoads uint64
	// GoReason and GoDetail, with HeaderGo: whether the owner, a Go
	// program, has its system calls seen by osf (policy.ReasonNone) or
	// why not, and its Go version or what osf did not recognise.
	GoReason uint8
	GoDetail string
	entries  []Entry
}

// Entries returns the tracked fds in fd order.
func (t *Table) Entries() []Entry { return t.entries }

// Lookup returns the entry of fd, if the table tracks it.
func (t *Table) Lookup(fd int) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(t.entries, fd, func(e Entry, fd int) int { return cmp.Compare(e.FD, fd) })
	if !ok {
		return Entry{}, false
	}
	return t.entries[i], true
}

// CoreLoaded reports whether the process has loaded the Go core.
func (t *Table) CoreLoaded() bool { return t.Flags&HeaderCoreLoaded != 0 }

// tableLink is what /proc/PID/fd/N reads for the table's memfd.
const tableLink = "/memfd:" + Name + " (deleted)"

// Find returns the fd number of pid's table by looking for its memfd among
// the process's fds; ErrNoTable when there is none. It looks first where
// libosf.so puts the table (the start of its hidden fd range, which
// depends on the process's RLIMIT_NOFILE), so that a process with
// thousands of fds costs one readlink, not thousands.
func Find(pid int) (int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	if fd, ok := hiddenBase(pid); ok {
		if link, err := os.Readlink(dir + strconv.Itoa(fd)); err == nil && link == tableLink {
			return fd, nil
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1, fmt.Errorf("fdtable: read %s: %w", dir, err)
	}
	for _, e := range ents {
		link, err := os.Readlink(dir + e.Name())
		if err != nil || link != tableLink {
			continue
		}
		fd, err := strconv.Atoi(e.Name())
		if err == nil {
			return fd, nil
		}
	}
	return -1, ErrNoTable
}

// hiddenBase returns the first fd of pid's hidden range as libosf.so
// computes it (osf_fdt_hidden_base in fdwindow.c) from the soft
// RLIMIT_NOFILE in /proc/PID/limits. It is only a first guess: the limit
// may have changed since the table was made, and Find falls back to a
// scan.
func hiddenBase(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Max open files")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		soft := uint64(1024)
		if f[0] != "unlimited" {
			if soft, err = strconv.ParseUint(f[0], 10, 64); err != nil {
				return 0, false
			}
		}
		switch {
		case soft >= 128:
			return int(min(soft/2, 1024)), true
		case soft > 19:
			return int(soft - 16), true
		}
		return 3, true
	}
	return 0, false
}

// Open reads pid's table. It needs the same access as reading the
// process's /proc/PID/fd (same user, or root).
func Open(pid int) (*Table, error) {
	fd, err := Find(pid)
	if err != nil {
		return nil, err
	}
	// The fd may have been closed and reused since Find: look before
	// opening, so that osfstat never opens (and so disturbs) anything but
	// a regular file, and open without blocking.
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	var before unix.Stat_t
	if err := unix.Stat(path, &before); err != nil {
		return nil, fmt.Errorf("fdtable: stat table of %d: %w", pid, err)
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, ErrNoTable
	}
	tfd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("fdtable: open table of %d: %w", pid, err)
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstat(tfd, &st); err != nil {
		return nil, fmt.Errorf("fdtable: stat table of %d: %w", pid, err)
	}
	if st.Dev != before.Dev || st.Ino != before.Ino {
		return nil, ErrNoTable
	}
	if st.Size < SizeofHeader {
		// A table being created: the memfd exists before it is sized.
		return nil, ErrNoTable
	}
	m, err := unix.Mmap(tfd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("fdtable: map table of %d: %w", pid, err)
	}
	defer unix.Munmap(m)
	t := &Table{PID: pid, FD: fd}
	if err := t.readGuarded(m); err != nil {
		return nil, err
	}
	return t, nil
}

// readGuarded is read with memory faults turned into an error: the table
// is not sealed, and an owner that shrinks it while it is being read must
// not crash the reader (SIGBUS).
func (t *Table) readGuarded(m []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: fault while reading the table: %v", ErrLayout, r)
		}
	}()
	return t.read(m)
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
		t.GoReason = uint8(h.go_reason)
		t.GoDetail = goString(h.go_detail[:])
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
		Cause:       uint8(r.cause),
		Local:       sockaddr(r.local[:]),
		Peer:        sockaddr(r.peer[:]),
		Ino:         uint64(r.ino),
		OwnerFD:     int(r.owner_fd),
		RingBytes:   uint32(r.ring_bytes),
		Slot:        (int(r.slot1) | int(r.slot1_hi)<<8) - 1,
		Ops:         Ops(r.ops),
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

// goString reads a NUL-terminated C string of at most len(b) bytes that
// another process wrote.
func goString(b []C.char) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
