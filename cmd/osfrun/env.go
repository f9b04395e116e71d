package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// libName is the file name of the library osfrun preloads.
const libName = "libosf.so"

// loaderName is the program osfrun --static runs prog through, next to
// libosf.so (preload/loader/osfload.c).
const loaderName = "osfload"

// getEnv returns the value of name in env; the first occurrence counts, as
// with getenv.
func getEnv(env []string, name string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return ""
}

// setEnv returns env with name set to value: the first occurrence is
// replaced in place and later ones are dropped, or the variable is appended.
func setEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	done := false
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != name {
			out = append(out, kv)
		} else if !done {
			out = append(out, name+"="+value)
			done = true
		}
	}
	if !done {
		out = append(out, name+"="+value)
	}
	return out
}

// preloadSep reports whether c separates LD_PRELOAD entries, as for ld.so.
func preloadSep(c rune) bool { return c == ' ' || c == ':' }

// preloadList returns the LD_PRELOAD value with lib in front of current,
// unless current already names lib (the same path or the same file). It
// fails when lib contains a separator, which LD_PRELOAD cannot express.
func preloadList(current, lib string) (string, error) {
	if strings.ContainsFunc(lib, preloadSep) {
		return "", fmt.Errorf("library path %q contains a space or colon, which LD_PRELOAD cannot hold", lib)
	}
	entries := strings.FieldsFunc(current, preloadSep)
	for _, e := range entries {
		if sameFile(e, lib) {
			return current, nil
		}
	}
	if len(entries) == 0 {
		return lib, nil
	}
	return lib + ":" + current, nil
}

// sameFile reports whether paths a and b are equal or name the same file.
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	ia, err := os.Stat(a)
	if err != nil {
		return false
	}
	ib, err := os.Stat(b)
	return err == nil && os.SameFile(ia, ib)
}

// findLib returns the absolute path of the library to preload: flagLib if
// set, else envLib (OSF_LIB) if set, else ../libosf.so relative to the real
// path of the osfrun executable exe (the build's layout, build/bin/osfrun
// and build/libosf.so), else libosf.so next to it, else the installed
// layouts ../lib/libosf.so (make install) and ../lib/TRIPLET/libosf.so (the
// Debian package). A path that was asked for
// but does not name a file is an error, and so is finding nothing.
func findLib(flagLib, envLib, exe string) (string, error) {
	switch {
	case flagLib != "":
		return checkLib(flagLib, "--lib")
	case envLib != "":
		return checkLib(envLib, "OSF_LIB")
	case exe == "":
		return "", fmt.Errorf("%s not found: cannot locate the osfrun executable; use --lib or OSF_LIB", libName)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	dir := filepath.Dir(exe)
	candidates := []string{
		filepath.Join(dir, "..", libName),
		filepath.Join(dir, libName),
		filepath.Join(dir, "..", "lib", libName),
	}
	if t, ok := multiarch[runtime.GOARCH]; ok {
		candidates = append(candidates, filepath.Join(dir, "..", "lib", t, libName))
	}
	for _, c := range candidates {
		if isFile(c) {
			return filepath.Abs(filepath.Clean(c))
		}
	}
	return "", fmt.Errorf("%s not found in %s; use --lib or OSF_LIB", libName, strings.Join(candidates, ", "))
}

// multiarch maps GOARCH to the Debian multiarch triplet of its library
// directory.
var multiarch = map[string]string{
	"amd64":   "x86_64-linux-gnu",
	"arm64":   "aarch64-linux-gnu",
	"ppc64le": "powerpc64le-linux-gnu",
	"s390x":   "s390x-linux-gnu",
	"riscv64": "riscv64-linux-gnu",
}

// checkLib returns the absolute form of path if it names a file; from says
// where the path came from.
func checkLib(path, from string) (string, error) {
	if !isFile(path) {
		return "", fmt.Errorf("%s %s: no such file", from, path)
	}
	return filepath.Abs(path)
}

// isFile reports whether path names something other than a directory.
func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}
