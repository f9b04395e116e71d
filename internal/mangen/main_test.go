package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the variable table in README.md")

// The README's variable table sits between these markers.
const (
	varsBegin = "<!-- BEGIN variables: generated from internal/policy by `go test ./internal/mangen -update`; do not edit by hand -->\n"
	varsEnd   = "<!-- END variables -->\n"
)

// TestREADMEVariables checks that README.md's variable table is the one
// generated from internal/policy, the source of osf(7)'s list too; -update
// rewrites it.
func TestREADMEVariables(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i, j := strings.Index(readme, varsBegin), strings.Index(readme, varsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated variable table between\n%s%s", path, varsBegin, varsEnd)
	}
	i += len(varsBegin)
	want := VariablesMarkdown()
	if *update {
		if err := os.WriteFile(path, []byte(readme[:i]+want+readme[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if readme[i:j] != want {
		t.Errorf("%s: the variable table is stale; run go test ./internal/mangen -update\nhave:\n%s\nwant:\n%s", path, readme[i:j], want)
	}
}

// TestPagesRender generates every page and renders it with man -l: no
// error, no warning, and every variable in osf(7).
func TestPagesRender(t *testing.T) {
	man, err := exec.LookPath("man")
	if err != nil {
		t.Skip("man is not installed (make installs man-db)")
	}
	tmpls, _ := filepath.Glob(filepath.Join("..", "..", "docs", "man", "*.in"))
	if len(tmpls) < 5 {
		t.Fatalf("templates: %q, want osf.7, osfrun.1, osfstat.8, osfperf.1, qsock_readable.3", tmpls)
	}
	dir := t.TempDir()
	for _, tmpl := range tmpls {
		b, err := os.ReadFile(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(string(b), ".so man"); ok { // a link to another page
			base := filepath.Base(strings.TrimSpace(target))
			if _, err := os.Stat(filepath.Join(filepath.Dir(tmpl), base+".in")); err != nil {
				t.Errorf("%s links to a page without a template: %v", tmpl, err)
			}
			continue
		}
		page := filepath.Join(dir, strings.TrimSuffix(filepath.Base(tmpl), ".in"))
		if err := os.WriteFile(page, []byte(expand(string(b), "test")), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(man, "--warnings", "-l", page)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "LC_ALL=C.UTF-8")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || stderr.Len() > 0 || len(out) < 200 {
			t.Errorf("man -l %s: %v, stderr %q, %d bytes", page, err, stderr.String(), len(out))
		}
		if filepath.Base(page) == "osf.7" {
			for _, v := range shown() {
				if !strings.Contains(string(out), v.Name) {
					t.Errorf("osf(7) does not mention %s", v.Name)
				}
			}
		}
	}
}
