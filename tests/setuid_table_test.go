package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestSetuidNeverAdoptsTable is issue 24's item 2: with libosf.so in
// /etc/ld.so.preload (the README's whole-host mode; here only in a private
// mount namespace, over an overlay of /etc), a set-user-ID root program
// started by user nobody with a raw execve (no osf exec hook) inherits an
// offloaded connection and nobody's fd table, which another process of
// nobody keeps mapped writable and fills with a hostile entry for the
// connection (kind shm, the program's image, connection pointer
// 0x4141414141414141). Before, the program mapped that table shared and
// died of SIGSEGV as root on its first call on the connection; now a
// program started with AT_SECURE never adopts an inherited table (and no
// process adopts one another user made), so it runs on, with the
// connection as the plain socket it is.
func TestSetuidNeverAdoptsTable(t *testing.T) {
	t.Parallel()
	setpriv := testutil.Tool(t, "setpriv")
	suid, plain := setuidPair(t, setuidDir(t), "tabletamper")
	ov := t.TempDir()
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(ov, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ov, "upper", "ld.so.preload"), []byte(testutil.Lib(t)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc || { echo "no overlay of /etc"; exit 0; }
shift; exec "$@"`
	args := append([]string{"-m", "sh", "-c", script, "sh", ov, setpriv}, asNobody...)
	args = append(args, plain, "attack", suid, "2")
	r := testutil.Cmd(t, nil, testutil.Tool(t, "unshare"), args...).Run(longRun)
	if strings.Contains(r.Stdout, "no overlay of /etc") {
		t.Skip("cannot overlay /etc in a private mount namespace")
	}
	if !r.OK() || !strings.Contains(r.Stdout, "transport shm") {
		t.Fatalf("tabletamper attack (the connection must be offloaded): %s", r)
	}
	if !strings.Contains(r.Stdout, "victim: survived euid 0") || !strings.Contains(r.Stdout, "victim exit 0") {
		t.Fatalf("the setuid program used a table its caller wrote: %s", r)
	}
}
