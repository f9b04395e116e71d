package fdtable

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHiddenBase checks that the first guess of where a process keeps its
// table follows the rule of osf_fdt_hidden_base (fdwindow.c) for this
// process's own limit.
func TestHiddenBase(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	soft := rl.Cur
	if soft == unix.RLIM_INFINITY {
		soft = 1024
	}
	want := 3
	switch {
	case soft >= 128:
		want = int(min(soft/2, 1024))
	case soft > 19:
		want = int(soft - 16)
	}
	got, ok := hiddenBase(os.Getpid())
	if !ok || got != want {
		t.Errorf("hiddenBase = %d, %v; want %d (soft limit %d)", got, ok, want, soft)
	}
	if _, ok := hiddenBase(-1); ok {
		t.Error("hiddenBase of no process succeeded")
	}
}

func TestLookup(t *testing.T) {
	tab := &Table{entries: []Entry{{FD: 3}, {FD: 7, Kind: KindShm}, {FD: 1024, Kind: KindHidden}}}
	if e, ok := tab.Lookup(7); !ok || e.Kind != KindShm {
		t.Errorf("Lookup(7) = %+v, %v", e, ok)
	}
	if _, ok := tab.Lookup(5); ok {
		t.Error("Lookup(5) found an entry")
	}
	if e, ok := tab.Lookup(1024); !ok || e.Kind != KindHidden {
		t.Errorf("Lookup(1024) = %+v, %v", e, ok)
	}
}

// TestOpenNoTable checks that a process without a table (this one) says so.
func TestOpenNoTable(t *testing.T) {
	if _, err := Open(os.Getpid()); err != ErrNoTable {
		t.Errorf("Open(self) = %v, want ErrNoTable", err)
	}
}

// TestReadShrunkTable checks that a table whose owner shrank it under the
// reader's mapping gives an error, not a crash (SIGBUS).
func TestReadShrunkTable(t *testing.T) {
	fd, err := unix.MemfdCreate("shrink", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 2*SizeofHeader); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(fd, 0, 2*SizeofHeader, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if err := unix.Ftruncate(fd, 0); err != nil {
		t.Fatal(err)
	}
	tab := &Table{}
	if err := tab.readGuarded(m); err == nil {
		t.Error("reading a shrunk table succeeded")
	}
}
