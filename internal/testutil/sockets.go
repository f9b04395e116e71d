package testutil

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Kernel socket tables, as SocketTable names them. An offloaded connection's
// application fd is a connected AF_UNIX socket (its wake socket), so the
// kernel lists it in /proc/net/unix; kernel TCP is in /proc/net/tcp or tcp6.
const (
	TableUnix = "unix"
	TableTCP  = "tcp"
)

// SocketInode returns the inode of the socket at fd of process pid, read
// from the /proc/PID/fd/FD link ("socket:[INODE]"); an error when fd is not
// open or not a socket.
func SocketInode(pid, fd int) (uint64, error) {
	link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
	if err != nil {
		return 0, err
	}
	var ino uint64
	if _, err := fmt.Sscanf(link, "socket:[%d]", &ino); err != nil {
		return 0, fmt.Errorf("fd %d of process %d is %q, not a socket", fd, pid, link)
	}
	return ino, nil
}

// SocketTable returns which kernel table of this network namespace lists
// the socket with inode ino: TableUnix, TableTCP, or "" for neither.
func SocketTable(ino uint64) (string, error) {
	for _, tab := range []struct{ file, name string }{
		{"/proc/net/unix", TableUnix}, {"/proc/net/tcp", TableTCP}, {"/proc/net/tcp6", TableTCP},
	} {
		inodes, err := tableInodes(tab.file)
		if err != nil {
			return "", err
		}
		if inodes[ino] {
			return tab.name, nil
		}
	}
	return "", nil
}

// SocketTables returns, for every socket fd of process pid, the kernel
// table that lists it (TableUnix, TableTCP or ""). Other fds are left out.
func SocketTables(pid int) (map[int]string, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	var tables [3]map[uint64]bool
	for i, f := range []string{"/proc/net/unix", "/proc/net/tcp", "/proc/net/tcp6"} {
		if tables[i], err = tableInodes(f); err != nil {
			return nil, err
		}
	}
	out := map[int]string{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ino, err := SocketInode(pid, fd)
		if err != nil {
			continue
		}
		switch {
		case tables[0][ino]:
			out[fd] = TableUnix
		case tables[1][ino] || tables[2][ino]:
			out[fd] = TableTCP
		default:
			out[fd] = ""
		}
	}
	return out, nil
}

// tableInodes returns the inodes listed in /proc/net/unix (7th field) or
// /proc/net/tcp[6] (10th field); a missing file (no IPv6) lists none.
func tableInodes(file string) (map[uint64]bool, error) {
	field := 9
	if filepath.Base(file) == "unix" {
		field = 6
	}
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[uint64]bool{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) <= field {
			continue
		}
		if ino, err := strconv.ParseUint(fs[field], 10, 64); err == nil {
			out[ino] = true
		}
	}
	return out, sc.Err()
}

// WorldReadableTempDir returns a new directory (removed at the end of the
// test) that every user can read and traverse, mode 0755 along a path of
// directories that are so too: for servers that drop privileges (nginx's
// workers run as nobody) and must read what the test put there.
// t.TempDir's directories are 0700.
func WorldReadableTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "osftest-")
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testutil: %v", err)
	}
	return dir
}
