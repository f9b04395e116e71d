package main

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestSetEnv(t *testing.T) {
	tests := []struct {
		env         []string
		name, value string
		want        []string
	}{
		{nil, "A", "1", []string{"A=1"}},
		{[]string{"B=2"}, "A", "1", []string{"B=2", "A=1"}},
		{[]string{"A=0", "B=2", "A=9"}, "A", "1", []string{"A=1", "B=2"}},
		{[]string{"AB=0", "A"}, "A", "", []string{"AB=0", "A="}},
	}
	for _, tt := range tests {
		if got := setEnv(tt.env, tt.name, tt.value); !slices.Equal(got, tt.want) {
			t.Errorf("setEnv(%q, %s, %s) = %q, want %q", tt.env, tt.name, tt.value, got, tt.want)
		}
	}
}

func TestGetEnv(t *testing.T) {
	env := []string{"A=1", "LD_PRELOAD=x y", "A=2", "B"}
	for name, want := range map[string]string{"A": "1", "LD_PRELOAD": "x y", "B": "", "C": ""} {
		if got := getEnv(env, name); got != want {
			t.Errorf("getEnv(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestPreloadList(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libosf.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.so")
	if err := os.Symlink(lib, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		current, want string
	}{
		{"", lib},
		{"  : ", lib},
		{"/a.so", lib + ":/a.so"},
		{"/a.so /b.so", lib + ":/a.so /b.so"},
		{"/a.so:" + lib, "/a.so:" + lib},
		{"/a.so " + lib + " /b.so", "/a.so " + lib + " /b.so"},
		{link, link},
		{dir + "/./libosf.so", dir + "/./libosf.so"},
		{"libosf.so", lib + ":libosf.so"}, // a bare name is searched by ld.so; it may be another file
	}
	for _, tt := range tests {
		got, err := preloadList(tt.current, lib)
		if err != nil || got != tt.want {
			t.Errorf("preloadList(%q) = %q, %v; want %q", tt.current, got, err, tt.want)
		}
	}
	for _, bad := range []string{"/a b/libosf.so", "/a:b/libosf.so"} {
		if _, err := preloadList("", bad); err == nil || !strings.Contains(err.Error(), "space or colon") {
			t.Errorf("preloadList(%q) error = %v, want a space or colon error", bad, err)
		}
	}
}

func TestFindLib(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mkfile := func(path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// The build layout: build/bin/osfrun and build/libosf.so.
	buildExe := mkfile(filepath.Join(root, "build", "bin", "osfrun"))
	buildLib := mkfile(filepath.Join(root, "build", "libosf.so"))
	// A symlink to the executable elsewhere resolves to the build layout.
	linkDir := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	linkExe := filepath.Join(linkDir, "osfrun")
	if err := os.Symlink(buildExe, linkExe); err != nil {
		t.Fatal(err)
	}
	// A flat layout: the library next to the executable.
	flatExe := mkfile(filepath.Join(root, "flat", "osfrun"))
	flatLib := mkfile(filepath.Join(root, "flat", "libosf.so"))
	// The installed layouts: PREFIX/bin and PREFIX/lib (make install), or
	// PREFIX/lib/TRIPLET (the Debian package).
	instExe := mkfile(filepath.Join(root, "inst", "bin", "osfrun"))
	instLib := mkfile(filepath.Join(root, "inst", "lib", "libosf.so"))
	debExe := mkfile(filepath.Join(root, "deb", "bin", "osfrun"))
	debLib := mkfile(filepath.Join(root, "deb", "lib", multiarch[runtime.GOARCH], "libosf.so"))
	// No library at all.
	loneExe := mkfile(filepath.Join(root, "lone", "bin", "osfrun"))
	other := mkfile(filepath.Join(root, "other.so"))

	tests := []struct {
		name                 string
		flagLib, envLib, exe string
		want, err            string
	}{
		{"flag", other, buildLib, buildExe, other, ""},
		{"OSF_LIB", "", other, buildExe, other, ""},
		{"build layout", "", "", buildExe, buildLib, ""},
		{"symlinked executable", "", "", linkExe, buildLib, ""},
		{"next to executable", "", "", flatExe, flatLib, ""},
		{"make install layout", "", "", instExe, instLib, ""},
		{"Debian layout", "", "", debExe, debLib, ""},
		{"missing flag library", filepath.Join(root, "nope.so"), "", buildExe, "",
			"--lib " + filepath.Join(root, "nope.so") + ": no such file"},
		{"directory is not a library", root, "", buildExe, "", "--lib " + root + ": no such file"},
		{"missing OSF_LIB library", "", filepath.Join(root, "nope.so"), buildExe, "",
			"OSF_LIB " + filepath.Join(root, "nope.so") + ": no such file"},
		{"not found", "", "", loneExe, "",
			"libosf.so not found in " + filepath.Join(root, "lone", "libosf.so") + ", " +
				filepath.Join(root, "lone", "bin", "libosf.so") + ", " +
				filepath.Join(root, "lone", "lib", "libosf.so") + ", " +
				filepath.Join(root, "lone", "lib", multiarch[runtime.GOARCH], "libosf.so") + "; use --lib or OSF_LIB"},
		{"no executable", "", "", "", "", "libosf.so not found: cannot locate the osfrun executable; use --lib or OSF_LIB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findLib(tt.flagLib, tt.envLib, tt.exe)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Errorf("findLib error = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("findLib = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFindLibRelative(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("libosf.so", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := findLib("libosf.so", "", "")
	want := filepath.Join(dir, "libosf.so")
	if err != nil || got != want {
		t.Errorf("findLib(relative) = %q, %v; want %q", got, err, want)
	}
}
