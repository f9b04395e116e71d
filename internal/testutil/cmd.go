package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall" // exec.ProcessState.Sys is a syscall.WaitStatus
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cleanupWait bounds how long a cleanup waits for a killed process, and how
// long Wait waits for output pipes held open by a process's children after
// the process itself exited (exec.Cmd.WaitDelay).
const cleanupWait = 10 * time.Second

// BaseEnv returns this process's environment without anything that would
// change how a program under test behaves: LD_PRELOAD, LD_DEBUG, every OSF_*
// variable and the network-namespace marker; and with OSF_CONF empty, so
// that a host's /etc/osf.conf cannot change the tests (a test may set
// OSF_CONF again). Commands start from it.
func BaseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "LD_PRELOAD", name == "LD_DEBUG", name == NetnsMarker,
			strings.HasPrefix(name, "OSF_"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, "OSF_CONF=")
}

// Preload returns env with LD_PRELOAD set to build/libosf.so, for running a
// program under osf: Cmd(t, Preload(t, "OSF_DEBUG_LOAD_CORE=1"), ...).
// With OSF_TEST_SHM_POOL=0 in the test's own environment (make test runs
// the shm tests so once more) it adds OSF_SHM_POOL=0 first, so that shm
// connections take a segment each instead of slots of regions (the
// default); a test's own env still wins.
func Preload(t testing.TB, env ...string) []string {
	t.Helper()
	out := append(RunSwitches(), env...)
	return append(out, "LD_PRELOAD="+Lib(t))
}

// RunSwitches are the variables Preload adds for this test run's
// switches (OSF_TEST_SHM_POOL=0, OSF_TEST_SHM_KFD=1, OSF_TEST_SHM_EFD=0),
// for a program given its environment otherwise (strace -E, a preload of
// its own): both ends of a connection must use the same.
func RunSwitches() []string {
	var out []string
	if !PoolRun() {
		out = append(out, "OSF_SHM_POOL=0")
	}
	if KfdRun() {
		out = append(out, "OSF_SHM_KFD=1")
	}
	if !EfdRun() {
		out = append(out, "OSF_SHM_EFD=0")
	}
	return out
}

// StraceEnv is Preload(t, env...) as strace's -E arguments.
func StraceEnv(t testing.TB, env ...string) []string {
	t.Helper()
	var out []string
	for _, v := range Preload(t, env...) {
		out = append(out, "-E", v)
	}
	return out
}

// PoolRun reports whether this test run makes shm connections from
// regions, the default (not with OSF_TEST_SHM_POOL=0: Preload adds
// OSF_SHM_POOL=0), and always with OSF_TEST_SHM_KFD=1.
func PoolRun() bool { return os.Getenv("OSF_TEST_SHM_POOL") != "0" || KfdRun() }

// KfdRun reports whether this test run keeps shm connections on their
// kernel TCP sockets (OSF_TEST_SHM_KFD=1: Preload adds OSF_SHM_KFD=1,
// which implies the pool).
func KfdRun() bool { return os.Getenv("OSF_TEST_SHM_KFD") == "1" }

// EfdRun reports whether this test run's slots wake their writers on
// their region's eventfd, the default (not with OSF_TEST_SHM_EFD=0:
// Preload adds OSF_SHM_EFD=0, a writers' socket pair per connection).
func EfdRun() bool { return os.Getenv("OSF_TEST_SHM_EFD") != "0" }

// ShmTransport is what tests/progs/semantics.c reports for an offloaded
// connection end in this run: "unix" (the wake socket is the
// application's fd), or "kfd" (its own kernel TCP socket, offloaded).
func ShmTransport() string {
	if KfdRun() {
		return "kfd"
	}
	return "unix"
}

// ShmFamily is the socket family (SocketFamily) of an offloaded shm
// connection's fd in this run: "unix" (the wake socket dup'ed onto it), or
// "tcp" (OSF_TEST_SHM_KFD=1: its own kernel TCP socket), which a kernel
// TCP connection has too, so that only osfstat or qsock tells the two
// apart there.
func ShmFamily() string {
	if KfdRun() {
		return "tcp"
	}
	return "unix"
}

// SegMemfd is the name of the memfds that hold shm connections' rings in
// this run: "osf-seg", or "osf-region" in a pooled run.
func SegMemfd() string {
	if PoolRun() {
		return "osf-region"
	}
	return "osf-seg"
}

// Command is a program prepared by Cmd; Cmd may be adjusted (Dir, Stdin,
// ExtraFiles, SysProcAttr) before Run or Start.
type Command struct {
	Cmd *exec.Cmd

	t              testing.TB
	ctx            context.Context
	cancel         context.CancelFunc
	stdout, stderr *syncBuffer
	timedOut       atomic.Bool
	captured       []*capture // standard output and error, when Cmd set them up
}

// Cmd prepares NAME with ARGS in its own process group, with BaseEnv plus
// env (later entries win) and its standard output and error captured
// (unless the caller sets Cmd.Stdout or Cmd.Stderr). NAME without a slash
// is looked up in PATH. Nothing runs until Run or Start.
func Cmd(t testing.TB, env []string, name string, args ...string) *Command {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Command{
		t: t, ctx: ctx, cancel: cancel,
		stdout: &syncBuffer{}, stderr: &syncBuffer{},
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(BaseEnv(), env...)
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGKILL}
	cmd.Cancel = func() error {
		killGroup(cmd.Process.Pid)
		return nil
	}
	cmd.WaitDelay = cleanupWait
	c.Cmd = cmd
	return c
}

// Run starts the command and waits for it at most timeout; on timeout it
// kills the process group and returns with TimedOut set. It never fails the
// test itself: check the Result (or use MustRun).
func (c *Command) Run(timeout time.Duration) Result {
	c.t.Helper()
	p, err := c.start()
	if err != nil {
		return Result{Err: err, ExitCode: -1}
	}
	return p.Wait(timeout)
}

// MustRun is Run that fails the test unless the command exits with status 0
// within timeout. It must be called from the test's goroutine.
func (c *Command) MustRun(timeout time.Duration) Result {
	c.t.Helper()
	r := c.Run(timeout)
	if !r.OK() {
		c.t.Fatalf("%s: %s", c, r)
	}
	return r
}

// String returns the command line.
func (c *Command) String() string { return strings.Join(c.Cmd.Args, " ") }

// Start starts the command and registers a cleanup that kills its process
// group with SIGKILL and waits for it (bounded). It fails the test if the
// command cannot be started.
func (c *Command) Start() *Process {
	c.t.Helper()
	p, err := c.start()
	if err != nil {
		c.t.Fatalf("start %s: %v", c, err)
	}
	return p
}

func (c *Command) start() (*Process, error) {
	if err := c.setupCapture(); err != nil {
		c.cancel()
		return nil, err
	}
	err := c.Cmd.Start()
	for _, cp := range c.captured {
		cp.w.Close() // the child has its copy
	}
	if err != nil {
		for _, cp := range c.captured {
			cp.r.Close()
		}
		c.cancel()
		return nil, err
	}
	for _, cp := range c.captured {
		go cp.copy()
	}
	p := &Process{Pid: c.Cmd.Process.Pid, c: c, started: time.Now(), done: make(chan struct{})}
	go p.reap()
	c.t.Cleanup(func() {
		killGroup(p.Pid)
		select {
		case <-p.done:
		case <-time.After(cleanupWait):
		}
		c.cancel()
	})
	return p, nil
}

// Process is a started Command.
type Process struct {
	Pid int

	c       *Command
	started time.Time
	done    chan struct{}
	res     Result
}

func (p *Process) reap() {
	err := p.c.Cmd.Wait()
	// Output written before the exit is in the pipes now; take it, but do
	// not wait for children that keep the pipes open.
	for _, cp := range p.c.captured {
		cp.finish()
	}
	r := Result{Elapsed: time.Since(p.started), ExitCode: -1}
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.ExitCode = 0
	case errors.As(err, &ee):
		r.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Signal = unix.Signal(ws.Signal())
		}
	default:
		r.Err = err
		if st := p.c.Cmd.ProcessState; st != nil {
			r.ExitCode = st.ExitCode()
			if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.Signal = unix.Signal(ws.Signal())
			}
		}
	}
	r.TimedOut = p.c.timedOut.Load()
	r.Stdout, r.Stderr = p.c.stdout.String(), p.c.stderr.String()
	p.res = r
	close(p.done)
}

// Wait waits at most timeout for the process to exit; on timeout it kills
// the process group with SIGKILL, waits for that, and returns with TimedOut
// set.
func (p *Process) Wait(timeout time.Duration) Result {
	select {
	case <-p.done:
		return p.res
	case <-time.After(timeout):
	}
	dump := GroupThreads(p.Pid)
	p.c.timedOut.Store(true)
	p.c.cancel() // kills the group through Cmd.Cancel
	select {
	case <-p.done:
	case <-time.After(cleanupWait):
		return Result{TimedOut: true, ExitCode: -1, Err: fmt.Errorf("process %d did not die after SIGKILL", p.Pid),
			Stdout: p.Stdout(), Stderr: p.Stderr(), Threads: dump}
	}
	r := p.res
	r.TimedOut = true
	r.Threads = dump
	return r
}

// Exited reports whether the process has exited (and been reaped).
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process (not its group). It returns an error if
// the process has already exited.
func (p *Process) Signal(sig unix.Signal) error {
	if p.Exited() {
		return fmt.Errorf("process %d has exited", p.Pid)
	}
	return unix.Kill(p.Pid, sig)
}

// Stdout returns the standard output captured so far.
func (p *Process) Stdout() string { return p.c.stdout.String() }

// Stderr returns the standard error captured so far.
func (p *Process) Stderr() string { return p.c.stderr.String() }

// WaitOutput waits at most timeout until the process's standard output
// contains substr and returns the output so far. It fails the test if the
// process exits first or the time runs out. It must be called from the
// test's goroutine.
func (p *Process) WaitOutput(substr string, timeout time.Duration) string {
	p.c.t.Helper()
	out, err := p.AwaitOutput(substr, timeout)
	if err != nil {
		p.c.t.Fatal(err)
	}
	return out
}

// AwaitOutput is WaitOutput that returns an error instead of failing the
// test, for use from any goroutine.
func (p *Process) AwaitOutput(substr string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		out := p.Stdout()
		if strings.Contains(out, substr) {
			return out, nil
		}
		if p.Exited() {
			r := p.res
			return out, fmt.Errorf("%s exited (%s) before printing %q", p.c, r, substr)
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%s did not print %q within %v; stdout %q, stderr %q; threads:\n%s",
				p.c, substr, timeout, out, p.Stderr(), GroupThreads(p.Pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killGroup sends SIGKILL to process group pgid. The kernel does not reuse a
// pid while it still names a process group, so this reaches only processes
// of that group, or nobody.
func killGroup(pgid int) {
	if pgid > 0 {
		_ = unix.Kill(-pgid, unix.SIGKILL)
	}
}

// Result is how a command ended, with its output.
type Result struct {
	Stdout, Stderr string
	// ExitCode is the exit status, or -1 when the process was killed by a
	// signal or could not be started.
	ExitCode int
	// Signal is the signal that killed the process, or 0.
	Signal unix.Signal
	// TimedOut means the process was killed because its time ran out.
	TimedOut bool
	// Err is set when the command could not be started or waited for.
	Err     error
	Elapsed time.Duration
	// Threads is, for a process that timed out, what every thread of its
	// process group was doing when it was killed (see GroupThreads).
	Threads string
}

// OK reports whether the command ran and exited with status 0 in time.
func (r Result) OK() bool { return r.Err == nil && !r.TimedOut && r.ExitCode == 0 }

// String summarizes the result for a failure message, with the output.
func (r Result) String() string {
	var b strings.Builder
	switch {
	case r.Err != nil && r.ExitCode == -1 && r.Signal == 0:
		fmt.Fprintf(&b, "error: %v", r.Err)
	case r.TimedOut:
		fmt.Fprintf(&b, "timed out after %v (killed)", r.Elapsed.Round(time.Millisecond))
	case r.Signal != 0:
		fmt.Fprintf(&b, "killed by signal %d (%v)", int(r.Signal), r.Signal)
	default:
		fmt.Fprintf(&b, "exit status %d", r.ExitCode)
	}
	fmt.Fprintf(&b, "\n--- stdout:\n%s\n--- stderr:\n%s", clip(r.Stdout), clip(r.Stderr))
	if r.Threads != "" {
		fmt.Fprintf(&b, "\n--- threads when killed:\n%s", clip(r.Threads))
	}
	return b.String()
}

// clip shortens long output for messages, keeping its start and its end.
func clip(s string) string {
	const max = 4000
	if len(s) <= max {
		return s
	}
	return s[:max/2] + fmt.Sprintf("\n[... %d bytes ...]\n", len(s)-max) + s[len(s)-max/2:]
}

// capture copies one output pipe of a command into a buffer. The command
// gets the write end as an *os.File, so exec.Cmd.Wait returns when the
// process exits even if its children still hold the pipe.
type capture struct {
	r, w *os.File
	buf  *syncBuffer
	done chan struct{}
}

// captureGrace bounds how long, after a process exited, its output pipe may
// stay silent before the capture stops (children still hold it).
const captureGrace = 100 * time.Millisecond

func (c *Command) setupCapture() error {
	for _, out := range []struct {
		dst *io.Writer
		buf *syncBuffer
	}{{&c.Cmd.Stdout, c.stdout}, {&c.Cmd.Stderr, c.stderr}} {
		if *out.dst != nil {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		*out.dst = w
		c.captured = append(c.captured, &capture{r: r, w: w, buf: out.buf, done: make(chan struct{})})
	}
	return nil
}

func (cp *capture) copy() {
	defer close(cp.done)
	if _, err := io.Copy(cp.buf, cp.r); errors.Is(err, os.ErrDeadlineExceeded) {
		cp.drain()
	}
}

// drain takes, without waiting, what is still in the pipe after finish's
// deadline expired. Read fails as soon as the deadline has passed, before
// it looks at the pipe: on a loaded machine this goroutine may not run
// within the grace period, and the exited process's last output would be
// lost although it sits in the pipe.
func (cp *capture) drain() {
	_ = cp.r.SetReadDeadline(time.Time{})
	rc, err := cp.r.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		var n int
		var rerr error
		// The pipe is nonblocking (os.Pipe): one read, never a wait.
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		cp.buf.Write(buf[:n])
	}
}

// finish waits until the pipe is drained: at EOF, or when it has been
// silent for captureGrace.
func (cp *capture) finish() {
	for {
		_ = cp.r.SetReadDeadline(time.Now().Add(captureGrace))
		select {
		case <-cp.done:
			cp.r.Close()
			return
		case <-time.After(captureGrace * 2):
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
