// Package testutil holds the helpers that osf's integration tests share:
// where the built artifacts are, running programs bare and under
// LD_PRELOAD=libosf.so with bounded waits and guaranteed clean-up, moving a
// test binary into a private network namespace, ports, checksums, and
// asking osfstat (or /proc/PID/maps) what osf really did in a process.
//
// Every wait is bounded, every started process is killed (by process group,
// or by session for a pseudo-terminal) and reaped in a t.Cleanup, and a
// missing artifact fails the test with "run `make build` first". The
// helpers hold no test logic.
//
// # Usage
//
//	func TestMain(m *testing.M) { testutil.MainInNetns(m) }
//
//	func TestEcho(t *testing.T) {
//		port := testutil.FreePort(t)
//		srv := testutil.Cmd(t, testutil.Preload(t), testutil.Prog(t, "echod"),
//			strconv.Itoa(port)).Start()
//		testutil.WaitListening(t, fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
//
//		r := testutil.Cmd(t, testutil.Preload(t), testutil.Tool(t, "curl"), "-sS",
//			fmt.Sprintf("http://127.0.0.1:%d/", port)).MustRun(30 * time.Second)
//		_ = r.Stdout
//
//		if ok, _ := testutil.CoreMapped(srv.Pid); !ok {
//			t.Error("the server never loaded the core")
//		}
//		testutil.AssertTransport(t, srv.Pid, testutil.ByRole("listener"), testutil.TransportKernel)
//	}
//
// Paths: Root, Lib, Core, Bin, Prog (build/tests/NAME, from tests/progs) and
// Tool (a system program, /usr/bin before PATH). Commands: Cmd prepares a
// program with BaseEnv plus the given variables (Preload adds LD_PRELOAD),
// Command.Run and MustRun wait with a timeout, Command.Start returns a
// Process (WaitOutput, Signal, Wait), Command.StartPty a Terminal (Send,
// Expect). Inspection: Maps, MapsContain, LibMapped, CoreMapped, OsfStat,
// AssertTransport, AssertCoreLoaded.
package testutil
