package layers

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/osfproject/osf/"

// includeRE matches a C #include line, in a C file or a cgo preamble.
var includeRE = regexp.MustCompile(`^\s*(?://\s*)?#\s*include\s+([<"])([^>"]+)[>"]`)

// edge is one file's dependency on another unit.
type edge struct {
	pos, from, to, what string
	test                bool // from a _test.go file
}

// unitOf returns the unit that holds path (slash-separated, relative to
// the tree's root), "" when none does.
func unitOf(path string) string {
	best := ""
	for u := range Allowed {
		if (path == u || strings.HasPrefix(path, u+"/")) && len(u) > len(best) {
			best = u
		}
	}
	return best
}

// mayUse reports whether unit from may depend on unit to.
func mayUse(from, to string) bool {
	if from == to {
		return true
	}
	for _, a := range Allowed[from] {
		if a == to || (a == "*" && to != "preload") {
			return true
		}
	}
	return false
}

// reaches reports whether unit from may reach unit to through the table.
func reaches(from, to string, seen map[string]bool) bool {
	if from == to {
		return true
	}
	if seen[from] {
		return false
	}
	seen[from] = true
	for _, a := range Allowed[from] {
		if a != "*" && reaches(a, to, seen) {
			return true
		}
	}
	return false
}

// testMayUse reports whether a _test.go file of unit from may depend on
// unit to: what from may, internal/testutil, and any unit but preload and
// the programs that cannot reach from through the table (a test adds no
// circle to the product's graph, say an agreement test against
// internal/policy).
func testMayUse(from, to string) bool {
	switch {
	case mayUse(from, to) || to == "internal/testutil":
		return true
	case to == "preload" || strings.HasPrefix(to, "cmd/"):
		return false
	}
	return !reaches(to, from, map[string]bool{})
}

// skipDir reports the folders that hold no product or test source of the
// tree: the build, git's, fuzz corpora, packaging, docs.
func skipDir(rel string) bool {
	switch rel {
	case "build", ".git", "docs", "packaging":
		return true
	}
	return filepath.Base(rel) == "testdata"
}

// walkFiles calls fn with each file of the tree at root (rel: its path
// relative to root, slash-separated), but in the folders skipDir names
// and, with product, in tests/ and spike/.
func walkFiles(t *testing.T, root string, product bool, fn func(rel, path string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (skipDir(rel) || product && (rel == "tests" || rel == "spike")) {
				return filepath.SkipDir
			}
			return nil
		}
		fn(rel, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// edges returns every cross-unit dependency in the tree at root, and the
// source files no unit holds.
func edges(t *testing.T, root string) (out []edge, homeless []string) {
	t.Helper()
	walkFiles(t, root, false, func(rel, p string) {
		ext := filepath.Ext(p)
		if ext != ".c" && ext != ".h" && ext != ".go" {
			return
		}
		from := unitOf(rel)
		if from == "" {
			homeless = append(homeless, rel)
			return
		}
		add := func(line int, target, what string) {
			to := unitOf(target)
			if to != "" && to != from {
				out = append(out, edge{fmt.Sprintf("%s:%d", rel, line), from, to, what,
					strings.HasSuffix(rel, "_test.go")})
			}
		}
		includes(t, root, rel, add)
		if ext == ".go" {
			imports(t, root, rel, add)
		}
	})
	return out, homeless
}

// includes calls add for each #include of file rel that names a file of
// the tree: "x.h" relative to the file's folder, then as the Makefile's
// -Iinclude finds it, <x.h> only the latter.
func includes(t *testing.T, root, rel string, add func(int, string, string)) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		m := includeRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var cands []string
		if m[1] == `"` {
			cands = append(cands, filepath.Join(filepath.Dir(rel), m[2]))
		}
		cands = append(cands, filepath.Join("include", m[2]))
		for _, c := range cands {
			c = filepath.ToSlash(filepath.Clean(c))
			if strings.HasPrefix(c, "../") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, c)); err == nil {
				add(n, c, "#include "+m[0][strings.Index(m[0], m[1]):])
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// imports calls add for each import of Go file rel from this module.
func imports(t *testing.T, root, rel string, add func(int, string, string)) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		if strings.HasPrefix(path, modulePath) {
			add(fset.Position(im.Pos()).Line, strings.TrimPrefix(path, modulePath), "import "+path)
		}
	}
}

// TestLayers fails on every include or import against Allowed, with the
// file and line that makes it.
func TestLayers(t *testing.T) {
	es, homeless := edges(t, "../..")
	for _, h := range homeless {
		t.Errorf("%s: in no unit of layers.Allowed (give its folder a row)", h)
	}
	bad := 0
	for _, e := range es {
		if !mayUse(e.from, e.to) && !(e.test && testMayUse(e.from, e.to)) {
			bad++
			t.Errorf("%s: %s depends on %s (%s); %s may depend on %v only",
				e.pos, e.from, e.to, e.what, e.from, Allowed[e.from])
		}
	}
	if len(es) == 0 {
		t.Fatal("no dependency between units found: is the tree at ../..?")
	}
	t.Logf("%d cross-unit includes and imports, %d against the table", len(es), bad)
}

// TestAllowedHasNoCircle checks the table itself: no unit may reach
// itself through the units it may use, and every unit named exists.
func TestAllowedHasNoCircle(t *testing.T) {
	units := make([]string, 0, len(Allowed))
	for u := range Allowed {
		units = append(units, u)
		if _, err := os.Stat(filepath.Join("../..", u)); err != nil {
			t.Errorf("unit %s: %v", u, err)
		}
	}
	sort.Strings(units)
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(u string)
	visit = func(u string) {
		switch state[u] {
		case open:
			t.Errorf("circle in layers.Allowed: %s -> %s", strings.Join(path, " -> "), u)
			return
		case done:
			return
		}
		state[u] = open
		path = append(path, u)
		for _, v := range Allowed[u] {
			if v == "*" {
				continue
			}
			if _, ok := Allowed[v]; !ok {
				t.Errorf("unit %s may use %s, which has no row", u, v)
				continue
			}
			visit(v)
		}
		path = path[:len(path)-1]
		state[u] = done
	}
	for _, u := range units {
		visit(u)
		for _, v := range Allowed[u] {
			if v == "*" {
				for _, w := range units {
					if mayUse(w, u) && w != u && !contains(Allowed[w], "*") {
						t.Errorf("%s may use %s, which may use anything", w, u)
					}
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// MaxLines is the most lines a product source file may have (issue 29: a
// file a newcomer can read whole); tests, spikes and _test.go files are
// not bound.
const MaxLines = 900

// TestFileSize fails on every product C, header or Go file over MaxLines.
func TestFileSize(t *testing.T) {
	n := 0
	walkFiles(t, "../..", true, func(rel, p string) {
		ext := filepath.Ext(p)
		if (ext != ".c" && ext != ".h" && ext != ".go") || strings.HasSuffix(rel, "_test.go") {
			return
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if lines := strings.Count(string(b), "\n"); lines > MaxLines {
			t.Errorf("%s: %d lines, over %d: split it by concern", rel, lines, MaxLines)
		}
	})
	if n == 0 {
		t.Fatal("no product source found: is the tree at ../..?")
	}
}
