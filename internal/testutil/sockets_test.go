package testutil_test

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/osfproject/osf/internal/testutil"
)

func TestSocketTables(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lf, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])

	tabs, err := testutil.SocketTables(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got := tabs[int(lf.Fd())]; got != testutil.TableTCP {
		t.Errorf("TCP listener: table %q, want %q", got, testutil.TableTCP)
	}
	if got := tabs[pair[0]]; got != testutil.TableUnix {
		t.Errorf("AF_UNIX socket: table %q, want %q", got, testutil.TableUnix)
	}
	ino, err := testutil.SocketInode(os.Getpid(), pair[1])
	if err != nil {
		t.Fatal(err)
	}
	if got, err := testutil.SocketTable(ino); err != nil || got != testutil.TableUnix {
		t.Errorf("SocketTable(%d) = %q, %v", ino, got, err)
	}
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := testutil.SocketInode(os.Getpid(), int(f.Fd())); err == nil {
		t.Error("SocketInode(/dev/null) did not fail")
	}
}

func TestWorldReadableTempDir(t *testing.T) {
	dir := testutil.WorldReadableTempDir(t)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %v, want 0755", dir, st.Mode().Perm())
	}
}
