package testutil

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// This file answers questions about processes the tests did not start
// themselves (a program's fork children, a daemon, what an exec'd program
// holds) from /proc, and cleans them up by pid.

// procStat returns the fields of /proc/PID/task/TID/stat after the command
// name: field 3 of proc(5) (the state) is index 0.
func procStat(pid, tid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("testutil: /proc/%d/task/%d/stat: no command name", pid, tid)
	}
	return strings.Fields(s[i+1:]), nil
}

// ThreadState returns the state letter of thread tid of process pid (R
// running, S sleeping, D disk wait, T stopped, Z zombie, ...); pass tid ==
// pid for the main thread.
func ThreadState(pid, tid int) (byte, error) {
	f, err := procStat(pid, tid)
	if err != nil {
		return 0, err
	}
	return f[0][0], nil
}

// startTime returns when process pid started (field 22 of proc(5), in
// clock ticks since boot): with the pid, it names one process for good.
func startTime(pid int) (string, error) {
	f, err := procStat(pid, pid)
	if err != nil {
		return "", err
	}
	if len(f) < 20 {
		return "", fmt.Errorf("testutil: /proc/%d/stat: short", pid)
	}
	return f[19], nil
}

// Children returns the pids whose parent is pid.
func Children(pid int) []int {
	var out []int
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		n, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		f, err := procStat(n, n)
		if err != nil || len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		out = append(out, n)
	}
	return out
}

// Descendants returns pid's children, their children, and so on.
func Descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 && len(out) < 10000 {
		kids := Children(queue[0])
		queue = append(queue[1:], kids...)
		out = append(out, kids...)
	}
	return out
}

// ExeBase returns the base name of the program process pid runs now
// (/proc/PID/exe), or "" if it cannot be read.
func ExeBase(pid int) string {
	p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return ""
	}
	return filepath.Base(strings.TrimSuffix(p, " (deleted)"))
}

// Environ returns the environment process pid was exec'd with
// (/proc/PID/environ).
func Environ(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// KillOnCleanup registers a cleanup that kills process pid with SIGKILL,
// for processes that left the test's process groups (a daemon's setsid),
// and waits at most 10 s until it is gone. A pid reused by another process
// meanwhile is left alone (the start time must still match).
func KillOnCleanup(t testing.TB, pid int) {
	t.Helper()
	start, err := startTime(pid)
	if err != nil {
		return // already gone
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(cleanupWait)
		for {
			now, err := startTime(pid)
			if err != nil || now != start {
				return
			}
			if st, _ := ThreadState(pid, pid); st == 'Z' || st == 'X' {
				return // dead; its parent reaps it
			}
			_ = unix.Kill(pid, unix.SIGKILL)
			if time.Now().After(deadline) {
				t.Errorf("testutil: process %d did not die after SIGKILL", pid)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// SocketFamily says what the socket at fd of process pid is, by looking
// its inode up in this network namespace's /proc/net tables: "unix" (an
// osf-offloaded connection is a connected AF_UNIX socket), "tcp" (IPv4 or
// IPv6 TCP), or "" when fd is no socket found there.
func SocketFamily(pid, fd int) (string, error) {
	link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
	if err != nil {
		return "", err
	}
	ino, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return "", nil
	}
	ino = strings.TrimSuffix(ino, "]")
	for _, tb := range []struct {
		file, family string
		col          int
	}{
		{"/proc/net/unix", "unix", 6},
		{"/proc/net/tcp", "tcp", 9},
		{"/proc/net/tcp6", "tcp", 9},
	} {
		b, err := os.ReadFile(tb.file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > tb.col && f[tb.col] == ino {
				return tb.family, nil
			}
		}
	}
	return "", nil
}

// MemfdInodes returns the inodes of the memfds named name ("osf-seg") that
// process pid has open.
func MemfdInodes(pid int, name string) []uint64 {
	var out []uint64
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, e := range ents {
		p := fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())
		link, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(link, "/memfd:"+name+" ") {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			out = append(out, st.Ino)
		}
	}
	return out
}

// MemfdHolders describes every reference any process has to a memfd named
// name whose inode is one of inos: an open fd (/proc/*/fd) or a mapping
// (/proc/*/maps). It returns nil when none is left.
func MemfdHolders(name string, inos []uint64) []string {
	want := map[uint64]bool{}
	for _, i := range inos {
		want[i] = true
	}
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		fds, _ := os.ReadDir(d + "/fd")
		for _, e := range fds {
			p := d + "/fd/" + e.Name()
			link, err := os.Readlink(p)
			if err != nil || !strings.HasPrefix(link, "/memfd:"+name+" ") {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil && want[st.Ino] {
				out = append(out, fmt.Sprintf("%s -> %s (inode %d)", p, link, st.Ino))
			}
		}
		maps, err := os.ReadFile(d + "/maps")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(maps), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 || !strings.HasPrefix(f[5], "/memfd:"+name) {
				continue
			}
			if ino, err := strconv.ParseUint(f[4], 10, 64); err == nil && want[ino] {
				out = append(out, fmt.Sprintf("%s/maps: %s", d, line))
			}
		}
	}
	return out
}

// TryOsfStat runs `osfstat -p PID --json` once and returns what it says
// about pid; ok is false when osfstat does not list the process (not under
// osf, gone, or its fd table not found yet).
func TryOsfStat(t testing.TB, pid int) (p StatProc, ok bool) {
	t.Helper()
	r := Cmd(t, nil, Bin(t, "osfstat"), "-p", strconv.Itoa(pid), "--json").Run(10 * time.Second)
	if !r.OK() {
		return StatProc{}, false
	}
	var s Stat
	if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
		t.Fatalf("testutil: osfstat -p %d --json: bad JSON (%v): %q", pid, err, r.Stdout)
	}
	for _, sp := range s.Processes {
		if sp.PID == pid {
			return sp, true
		}
	}
	return StatProc{}, false
}

// WaitOsfStat asks osfstat about pid until cond holds for what it says,
// for at most timeout, and returns that; it fails the test (with the last
// answer) otherwise. what names the condition in the failure message. It
// must be called from the test's goroutine.
func WaitOsfStat(t testing.TB, pid int, timeout time.Duration, what string, cond func(StatProc) bool) StatProc {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, ok := TryOsfStat(t, pid)
		if ok && cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			if !ok {
				t.Fatalf("osfstat: process %d (%s) never listed within %v (waiting for %s)",
					pid, ExeBase(pid), timeout, what)
			}
			t.Fatalf("osfstat: process %d (%s): no %s within %v; sockets:\n%s",
				pid, p.Program, what, timeout, socketLines(p.Sockets))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Offloaded reports whether osfstat lists every one of fds in p as an
// offloaded shm connection.
func (p StatProc) Offloaded(fds ...int) bool {
	for _, fd := range fds {
		got := p.Select(ByFD(fd))
		if len(got) != 1 || got[0].Transport != TransportShm {
			return false
		}
	}
	return true
}
