package tests

import (
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// TestOsfrun checks osfrun's run mode (it sets LD_PRELOAD to libosf.so and
// the OSF_* variables of its flags, and the program runs under osf with
// its exit status passed back) and --explain.
func TestOsfrun(t *testing.T) {
	t.Parallel()
	osfrun := testutil.Bin(t, "osfrun")
	r := testutil.Cmd(t, nil, osfrun, "--", "/bin/sh", "-c", `echo "$LD_PRELOAD"`).MustRun(shortRun)
	if got := strings.TrimSpace(r.Stdout); got != testutil.Lib(t) {
		t.Errorf("osfrun -- sh -c 'echo $LD_PRELOAD' printed %q, want %q", got, testutil.Lib(t))
	}

	r = testutil.Cmd(t, nil, osfrun, "--routes", "kernel both * *", "--", "/bin/sh", "-c",
		`echo "$OSF_ROUTES"; grep -q /libosf.so /proc/$$/maps && echo mapped; exit 3`).Run(shortRun)
	if r.ExitCode != 3 || r.Stdout != "kernel both * *\nmapped\n" {
		t.Errorf("osfrun --routes ... -- sh: want OSF_ROUTES, libosf.so mapped and exit status 3: %s", r)
	}

	r = testutil.Cmd(t, nil, osfrun, "--explain", "127.0.0.1:53").MustRun(shortRun)
	for _, want := range []string{"rule 1", "=> kernel: route rule 1 chose kernel"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("osfrun --explain 127.0.0.1:53 does not say %q:\n%s", want, r.Stdout)
		}
	}
	r = testutil.Cmd(t, nil, osfrun, "--explain", "127.0.0.1:8080").MustRun(shortRun)
	if !strings.Contains(r.Stdout, "rule 2") {
		t.Errorf("osfrun --explain 127.0.0.1:8080 does not name rule 2 (offload both * local):\n%s", r.Stdout)
	}
}

// TestOsfstat runs a python program under osf that listens, connects to
// itself and accepts, and checks what osfstat (JSON, with and without -p,
// and the table) says about it: the process, core loaded, and its three
// sockets in their roles, offloaded over shm (both ends run under osf);
// and, with a rule that keeps everything on the kernel, on kernel TCP with
// a reason. osfstat -p on a bare process fails.
func TestOsfstat(t *testing.T) {
	t.Parallel()
	t.Run("shm", func(t *testing.T) {
		t.Parallel()
		checkOsfstat(t, nil, testutil.TransportShm, "shm")
	})
	t.Run("kernel-rule", func(t *testing.T) {
		t.Parallel()
		checkOsfstat(t, []string{"OSF_ROUTES=kernel both * *"}, testutil.TransportKernel, "route rule 1 chose kernel")
	})
}

func checkOsfstat(t *testing.T, env []string, transport, tableWord string) {
	l := startLoopback(t, osfLogged, env, python(t))
	p, stdin, lfd, cfd, sfd := l.p, l.stdin, l.lfd, l.cfd, l.sfd

	st := testutil.AssertCoreLoaded(t, p.Pid, true)
	if st.Program != "python3" {
		t.Errorf("osfstat program %q, want python3", st.Program)
	}
	for _, want := range []struct {
		fd   int
		role string
	}{{lfd, "listener"}, {cfd, "client"}, {sfd, "server"}} {
		for _, s := range testutil.AssertTransport(t, p.Pid, testutil.ByFD(want.fd), transport) {
			if s.Role != want.role || (transport == testutil.TransportKernel) != (s.Reason != "") {
				t.Errorf("fd %d: want role %s, and a reason only on kernel TCP: %s", want.fd, want.role, s)
			}
		}
	}

	found := false
	for _, proc := range testutil.OsfStatAll(t) {
		if proc.PID == p.Pid {
			found = true
			if len(proc.Sockets) < 3 || !proc.CoreLoaded {
				t.Errorf("osfstat --json: %+v", proc)
			}
		}
	}
	if !found {
		t.Errorf("osfstat --json does not list process %d", p.Pid)
	}

	r := testutil.Cmd(t, nil, testutil.Bin(t, "osfstat"), "-p", strconv.Itoa(p.Pid)).MustRun(shortRun)
	for _, want := range []string{strconv.Itoa(p.Pid), "python3", "loaded", "listener", "client", "server", tableWord} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("osfstat -p %d table does not show %q:\n%s", p.Pid, want, r.Stdout)
		}
	}
	stdin.Close()
	if r := p.Wait(shortRun); !r.OK() {
		t.Errorf("python: %s", r)
	}

	// A process without osf.
	b := bare.cmd(t, nil, "/bin/sleep", "30").Start()
	r = testutil.Cmd(t, nil, testutil.Bin(t, "osfstat"), "-p", strconv.Itoa(b.Pid), "--json").Run(shortRun)
	if r.ExitCode != 1 || !strings.Contains(r.Stderr, "does not run under osf") {
		t.Errorf("osfstat -p on a bare process: want exit 1 and \"does not run under osf\": %s", r)
	}
}
