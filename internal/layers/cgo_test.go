package layers

import (
	"bufio"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// goPkg is what TestCgoHeadersTracked needs to know of one Go package of
// the tree (its folder, relative to the root).
type goPkg struct {
	cgo     bool     // a non-test file imports "C"
	cgoSrcs []string // those files, and the folder's .c and .h files
	embeds  []string // the patterns of its //go:embed lines
	imports []string // the folders of the tree's packages it imports
}

// goPkgs reads every package of the tree at root (but tests/ and spike/,
// which are built by the Makefile or not at all).
func goPkgs(t *testing.T, root string) map[string]*goPkg {
	t.Helper()
	pkgs := map[string]*goPkg{}
	get := func(dir string) *goPkg {
		if pkgs[dir] == nil {
			pkgs[dir] = &goPkg{}
		}
		return pkgs[dir]
	}
	walkFiles(t, root, true, func(rel, p string) {
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return
		}
		pk := get(filepath.ToSlash(filepath.Dir(rel)))
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if path == "C" {
				pk.cgo = true
				pk.cgoSrcs = append(pk.cgoSrcs, rel)
			} else if strings.HasPrefix(path, modulePath) {
				pk.imports = append(pk.imports, strings.TrimPrefix(path, modulePath))
			}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "//go:embed "); ok {
				pk.embeds = append(pk.embeds, strings.Fields(rest)...)
			}
		}
	})
	for dir, pk := range pkgs {
		if !pk.cgo {
			continue
		}
		for _, ext := range []string{"*.c", "*.h"} {
			m, _ := filepath.Glob(filepath.Join(root, dir, ext))
			for _, f := range m {
				rel, _ := filepath.Rel(root, f)
				pk.cgoSrcs = append(pk.cgoSrcs, filepath.ToSlash(rel))
			}
		}
	}
	return pkgs
}

// quotedIncludes returns the files of the tree that file rel includes
// with #include "x", relative to its folder.
func quotedIncludes(t *testing.T, root, rel string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := includeRE.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != `"` {
			continue
		}
		c := filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), m[2])))
		if _, err := os.Stat(filepath.Join(root, c)); err == nil && !strings.HasPrefix(c, "../") {
			out = append(out, c)
		}
	}
	return out
}

// TestCgoHeadersTracked: Go's build cache keys a cgo package on the files
// of its own folder, so a package whose C includes a header of another
// folder (directly or through other headers) would keep an object built
// from the old header when only the header changed, as `go test
// ./sdp/sidetest` did outside make. Each such header's folder must hold a
// package that embeds it (//go:embed: its build output then changes with
// the header), and the including package must import that package,
// directly or through others, so that it is rebuilt too.
func TestCgoHeadersTracked(t *testing.T) {
	const root = "../.."
	pkgs := goPkgs(t, root)
	reaches := func(from, to string) bool {
		seen := map[string]bool{}
		var walk func(string) bool
		walk = func(d string) bool {
			if d == to {
				return true
			}
			if seen[d] || pkgs[d] == nil {
				return false
			}
			seen[d] = true
			for _, im := range pkgs[d].imports {
				if walk(im) {
					return true
				}
			}
			return false
		}
		return walk(from)
	}
	checked := 0
	for dir, pk := range pkgs {
		if !pk.cgo {
			continue
		}
		seen := map[string]bool{}
		var visit func(file, via string)
		visit = func(file, via string) {
			for _, h := range quotedIncludes(t, root, file) {
				if seen[h] {
					continue
				}
				seen[h] = true
				hdir := filepath.ToSlash(filepath.Dir(h))
				if hdir != dir {
					checked++
					owner := pkgs[hdir]
					embedded := false
					for _, pat := range ownerEmbeds(owner) {
						if ok, _ := filepath.Match(pat, filepath.Base(h)); ok {
							embedded = true
						}
					}
					switch {
					case !embedded:
						t.Errorf("%s includes %s (from %s): no Go package in %s embeds it (//go:embed), so a change to it would not rebuild %s",
							dir, h, via, hdir, dir)
					case !reaches(dir, hdir):
						t.Errorf("%s includes %s (from %s) but does not import %s, whose package embeds it: a change to it would not rebuild %s",
							dir, h, via, hdir, dir)
					}
				}
				visit(h, via)
			}
		}
		for _, src := range pk.cgoSrcs {
			visit(src, src)
		}
	}
	if checked == 0 {
		t.Fatal("no cgo package includes a header of another folder: is the tree at ../..?")
	}
}

func ownerEmbeds(p *goPkg) []string {
	if p == nil {
		return nil
	}
	return p.embeds
}
