package preload_test

import (
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// hooks are the libc names issue 2 requires libosf.so to interpose, plus
// fdopen (standard streams on offloaded fds, stdio.c), prctl (a
// seccomp filter puts osf in sandbox mode, sandbox.c) and the rlimit
// functions (they wait while osf places its fds above RLIMIT_NOFILE, fd.c),
// syscall (libuv closes with syscall(SYS_close), fd.c), and system and
// popen (they exec inside glibc, where no exec hook sees it: process.c
// settles the inheritance flags first).
var hooks = strings.Fields(`socket socketpair bind listen accept accept4 connect
	read readv write writev send sendto sendmsg sendmmsg recv recvfrom recvmsg
	recvmmsg sendfile sendfile64 splice close close_range closefrom shutdown dup dup2 dup3
	fcntl fcntl64 ioctl getsockopt setsockopt getsockname getpeername poll ppoll
	select pselect epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait
	epoll_pwait2 fork vfork daemon execve execv execvp execvpe execl execlp execle
	fexecve execveat posix_spawn posix_spawnp system popen sigaction signal siginterrupt __read_chk
	__recv_chk __recvfrom_chk __poll_chk __ppoll_chk fdopen prctl
	getrlimit getrlimit64 setrlimit setrlimit64 prlimit prlimit64 syscall`)

// otherHooks interpose other libraries' functions: libseccomp's
// seccomp_load (sandbox.c), resolved when that library is loaded.
var otherHooks = []string{"seccomp_load"}

// api is the qsock API, and osf_static_exec, which osfload calls to run a
// statically linked program (static.c).
var api = []string{"qsock_readable", "qsock_writable", "osf_static_exec"}

func buildDir(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "build")
	if d := os.Getenv("OSFTEST_BUILD_DIR"); d != "" {
		dir = d
	}
	return dir
}

func open(t *testing.T, name string) *elf.File {
	t.Helper()
	path := filepath.Join(buildDir(t), name)
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s: %v (run `make build` first)", path, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// defined returns the names of the defined, exported functions of f.
func defined(t *testing.T, f *elf.File) []string {
	t.Helper()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return names
}

// TestExports checks that libosf.so exports exactly the hooks and the
// qsock API (the version script hides everything else), and that the
// version script lists the same names.
func TestExports(t *testing.T) {
	want := slices.Sorted(slices.Values(append(append(slices.Clone(hooks), otherHooks...), api...)))
	if got := defined(t, open(t, "libosf.so")); !slices.Equal(got, want) {
		t.Errorf("libosf.so exports\n%v\nwant\n%v", got, want)
	}
	m, err := os.ReadFile("libosf.map")
	if err != nil {
		t.Fatal(err)
	}
	global := string(m)[strings.Index(string(m), "global:"):strings.Index(string(m), "local:")]
	listed := regexp.MustCompile(`[A-Za-z_0-9]+`).FindAllString(strings.TrimPrefix(global, "global:"), -1)
	if slices.Sort(listed); !slices.Equal(listed, want) {
		t.Errorf("libosf.map lists\n%v\nwant\n%v", listed, want)
	}
}

// TestHooksResolveInLibc checks that every hook has a libc definition for
// dlsym(RTLD_NEXT) to find (so the lazy stubs never abort).
func TestHooksResolveInLibc(t *testing.T) {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skipf("libc: %v", err)
	}
	defer f.Close()
	have := map[string]bool{}
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			have[s.Name] = true
		}
	}
	for _, h := range hooks {
		if !have[h] {
			t.Errorf("libc has no %s", h)
		}
	}
}

// TestCoreExports checks that the Go core exports only its entry points,
// and that only the core, not libosf.so, links rdma-core.
func TestCoreExports(t *testing.T) {
	core := open(t, "libosfcore.so")
	for _, name := range defined(t, core) {
		if !strings.HasPrefix(name, "osfcore_") {
			t.Errorf("libosfcore.so exports %s", name)
		}
	}
	libs, err := open(t, "libosf.so").ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if strings.Contains(l, "ibverbs") || strings.Contains(l, "rdmacm") {
			t.Errorf("libosf.so links %s; only the core may", l)
		}
	}
}
