package tests

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestSetuidNeverAdoptsTable is issue 24's item 2: with libosf.so in
// /etc/ld.so.preload (the README's whole-host mode; here only in a private
// mount namespace: ldSoPreloadMounts), a set-user-ID root program
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
	dir := filepath.Dir(suid)
	args := append(append(append([]string(nil), ldSoPreloadMounts(t, dir)...), setpriv), asNobody...)
	args = append(args, plain, "attack", suid, "2")
	r := bare.cmd(t, nil, args[0], args[1:]...).Run(longRun)
	if !r.OK() || !strings.Contains(r.Stdout, "transport shm") {
		t.Fatalf("tabletamper attack (the connection must be offloaded): %s", r)
	}
	if !strings.Contains(r.Stdout, "victim: survived euid 0") || !strings.Contains(r.Stdout, "victim exit 0") {
		t.Fatalf("the setuid program used a table its caller wrote: %s", r)
	}
}
