package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Terminal is a process started on a pseudo-terminal by StartPty, as its
// controlling terminal and session leader: what an interactive shell needs
// for job control.
type Terminal struct {
	*Process

	t      testing.TB
	master *os.File
	out    syncBuffer
	mu     sync.Mutex
	cursor int // Expect has consumed the output up to here
	eof    chan struct{}
}

// StartPty starts the command with a new pseudo-terminal (200 columns, so
// that lines do not wrap) as its standard input, output and error and its
// controlling terminal, in a new session. The cleanup kills every process
// of that session (job-control shells put jobs in process groups of their
// own) and waits for the command. It fails the test if that cannot be done.
func (c *Command) StartPty() *Terminal {
	c.t.Helper()
	t := c.t
	master, slave, err := openPty()
	if err != nil {
		t.Fatalf("testutil: open a pty: %v", err)
	}
	c.Cmd.Stdin, c.Cmd.Stdout, c.Cmd.Stderr = slave, slave, slave
	c.Cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: unix.SIGKILL}
	term := &Terminal{t: t, master: master, eof: make(chan struct{})}
	c.Cmd.Cancel = func() error {
		killSession(c.Cmd.Process.Pid)
		return nil
	}
	p, err := c.start()
	slave.Close()
	if err != nil {
		master.Close()
		t.Fatalf("start %s: %v", c, err)
	}
	term.Process = p
	t.Cleanup(func() {
		killSession(p.Pid)
		select {
		case <-p.done:
		case <-time.After(cleanupWait):
		}
		master.Close()
	})
	go term.read()
	return term
}

func (term *Terminal) read() {
	defer close(term.eof)
	buf := make([]byte, 4096)
	for {
		n, err := term.master.Read(buf)
		if n > 0 {
			term.out.Write(buf[:n])
		}
		if err != nil {
			return // EIO once every slave fd is closed
		}
	}
}

// Send writes s to the terminal, as if typed ("\x1a" is Ctrl-Z). It fails
// the test if the write fails.
func (term *Terminal) Send(s string) {
	term.t.Helper()
	if _, err := term.master.WriteString(s); err != nil {
		term.t.Fatalf("testutil: write to pty: %v", err)
	}
}

// Output returns everything the terminal has shown so far.
func (term *Terminal) Output() string { return term.out.String() }

// Expect waits at most timeout until substr appears in the terminal output
// after what earlier Expect calls consumed; it consumes the output up to the
// end of substr and returns that part. It fails the test (showing the whole
// transcript) if substr does not appear in time.
func (term *Terminal) Expect(substr string, timeout time.Duration) string {
	term.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		all := term.out.String()
		term.mu.Lock()
		from := term.cursor
		if i := strings.Index(all[from:], substr); i >= 0 {
			term.cursor = from + i + len(substr)
			term.mu.Unlock()
			return all[from:term.cursor]
		}
		term.mu.Unlock()
		select {
		case <-term.eof:
			if !strings.Contains(term.out.String()[from:], substr) {
				term.t.Fatalf("testutil: terminal closed before %q appeared; transcript:\n%s", substr, all)
			}
			continue
		default:
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("testutil: %q did not appear on the terminal within %v; transcript:\n%s",
				substr, timeout, all)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openPty opens a pseudo-terminal pair with the master close-on-exec.
func openPty() (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	ws := &unix.Winsize{Row: 50, Col: 200}
	if err := unix.IoctlSetWinsize(sfd, unix.TIOCSWINSZ, ws); err != nil {
		master.Close()
		unix.Close(sfd)
		return nil, nil, fmt.Errorf("set window size: %w", err)
	}
	return master, os.NewFile(uintptr(sfd), name), nil
}

// killSession sends SIGKILL to every process whose session is sid.
func killSession(sid int) {
	if sid <= 0 {
		return
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...; comm may hold spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 4 || f[3] != strconv.Itoa(sid) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}
