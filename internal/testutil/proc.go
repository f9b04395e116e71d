package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Substrings of /proc/PID/maps lines that show osf in a process.
const (
	// LibMapping appears when libosf.so is mapped.
	LibMapping = "/libosf.so"
	// CoreMapping appears when the Go core was loaded from its file.
	CoreMapping = "/libosfcore.so"
	// FreshCoreMapping appears when a fork child loaded a fresh copy of the
	// core from a memfd.
	FreshCoreMapping = "/memfd:osfcore"
)

// Maps returns /proc/PID/maps.
func Maps(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	return string(b), err
}

// MapsContain reports whether a line of /proc/PID/maps contains substr; the
// error is that of reading the file (the process is gone, for one).
func MapsContain(pid int, substr string) (bool, error) {
	m, err := Maps(pid)
	if err != nil {
		return false, err
	}
	return strings.Contains(m, substr), nil
}

// LibMapped reports whether process pid has libosf.so mapped.
func LibMapped(pid int) (bool, error) { return MapsContain(pid, LibMapping) }

// CoreMapped reports whether process pid has a copy of the Go core mapped,
// from its file or (in a fork child) from a memfd.
func CoreMapped(pid int) (bool, error) {
	m, err := Maps(pid)
	if err != nil {
		return false, err
	}
	return strings.Contains(m, CoreMapping) || strings.Contains(m, FreshCoreMapping), nil
}

// WaitFor polls cond every few milliseconds until it returns true, and fails
// the test if that does not happen within timeout; what names the condition
// in the failure message. It must be called from the test's goroutine.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("testutil: timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// GroupThreads describes every thread of every process in process group
// pgid, one line each: pid, tid, name, kernel wait channel and the
// system call it is in (/proc/PID/task/TID/syscall: number and arguments),
// which is usually enough to see where a hung program waits (a futex
// address, for one, can be matched against a library's symbols using the
// mapping in /proc/PID/maps).
func GroupThreads(pgid int) string {
	var b strings.Builder
	for _, pid := range groupMembers(pgid) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", pid))
		for _, task := range tasks {
			fmt.Fprintf(&b, "pid %d tid %s %s wchan=%s syscall=%s\n", pid, filepath.Base(task),
				readTrim(task+"/comm"), readTrim(task+"/wchan"), readTrim(task+"/syscall"))
		}
	}
	return b.String()
}

// groupMembers returns the pids whose process group is pgid.
func groupMembers(pgid int) []int {
	var out []int
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		s := readTrim(p)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
