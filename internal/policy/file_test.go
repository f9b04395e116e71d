package policy

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseFileErrors(t *testing.T) {
	tests := []struct{ text, want string }{
		{"OSF_SPIN_US 5", `osf: f:1: missing '=', want OSF_NAME = value: "OSF_SPIN_US 5"`},
		{"\n\nOSF_SPIN = 5", `osf: f:3: unknown variable OSF_SPIN: "OSF_SPIN = 5"`},
		{"OSF_ROUTES = kernel *", `osf: f:1: write route rules as lines of their own (offload|kernel ...), not OSF_ROUTES: "OSF_ROUTES = kernel *"`},
		{"OSF_LIB = /x", `osf: f:1: unknown variable OSF_LIB: "OSF_LIB = /x"`},
		{"OSF_CONF = /x", `osf: f:1: unknown variable OSF_CONF: "OSF_CONF = /x"`},
		{"offload * ; kernel *", `osf: f:1: one rule per line (';' is not allowed in the file): "offload * ; kernel *"`},
		{"[program nginx", `osf: f:1: missing ']': "[program nginx"`},
		{"[nginx]", `osf: f:1: want [program GLOB] or [global]: "[nginx]"`},
		{"[program a b]", `osf: f:1: want [program GLOB] or [global]: "[program a b]"`},
		{"[program [ab]]", `osf: f:1: character '[' in program glob, want letters, digits, . _ + @ : - and the wildcards * ?: "[program [ab]]"`},
		{"ring_size = 1M", `osf: f:1: want OSF_NAME = value, a rule (offload|kernel ...), [program GLOB] or [global]: "ring_size = 1M"`},
		{"offloaded *", `osf: f:1: want OSF_NAME = value, a rule (offload|kernel ...), [program GLOB] or [global]: "offloaded *"`},
	}
	for _, tt := range tests {
		_, err := ParseFile("f", []byte(tt.text))
		if err == nil || err.Error() != tt.want || !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseFile(%q) = %v, want %s", tt.text, err, tt.want)
		}
	}
}

// fileSample exercises comments, sections and precedence.
const fileSample = `# osf.conf
OSF_RING_SIZE = 64K   # trailing comment
OSF_LOG_FILE = /tmp/a#b
OSF_SPIN_US=7
kernel both * *:22

[program redis-*]
OSF_SPIN_US = 50
offload both * local
[global]
OSF_SPIN_US = 9
OSF_TRANSPORT = shm
[program curl]
kernel both * *
`

func TestMerge(t *testing.T) {
	f, err := ParseFile("/etc/osf.conf", []byte(fileSample))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		prog string
		env  []string
		want []string
	}{
		{"redis-server", nil, []string{
			"OSF_RING_SIZE=64K", "OSF_LOG_FILE=/tmp/a#b", "OSF_SPIN_US=50", "OSF_TRANSPORT=shm",
			"OSF_ROUTES=kernel both * *:22\noffload both * local",
			"OSF_CONF_ORIGIN=/etc/osf.conf\nOSF_RING_SIZE 2\nOSF_LOG_FILE 3\nOSF_SPIN_US 8\nOSF_TRANSPORT 12\nOSF_ROUTES 5 9"}},
		{"curl", []string{"OSF_RING_SIZE=4K", "OSF_ROUTES=offload both * *"}, []string{
			"OSF_RING_SIZE=4K", "OSF_ROUTES=offload both * *",
			"OSF_LOG_FILE=/tmp/a#b", "OSF_SPIN_US=9", "OSF_TRANSPORT=shm",
			"OSF_CONF_ORIGIN=/etc/osf.conf\nOSF_LOG_FILE 3\nOSF_SPIN_US 11\nOSF_TRANSPORT 12"}},
		{"nc", nil, []string{
			"OSF_RING_SIZE=64K", "OSF_LOG_FILE=/tmp/a#b", "OSF_SPIN_US=9", "OSF_TRANSPORT=shm",
			"OSF_ROUTES=kernel both * *:22",
			"OSF_CONF_ORIGIN=/etc/osf.conf\nOSF_RING_SIZE 2\nOSF_LOG_FILE 3\nOSF_SPIN_US 11\nOSF_TRANSPORT 12\nOSF_ROUTES 5"}},
	}
	for _, tt := range tests {
		got := f.Merge(tt.env, tt.prog)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Merge for %s:\n got %q\nwant %q", tt.prog, got, tt.want)
		}
	}
}

func TestParseWithOrigin(t *testing.T) {
	f, err := ParseFile("/etc/osf.conf", []byte("OSF_STRICT = 1\n\noffload both * local\noffload bogus 1.2.3.4:99999\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(f.Merge(nil, "x"))
	want := `osf: /etc/osf.conf:4: OSF_ROUTES="offload bogus 1.2.3.4:99999" (rule 2): port 99999 out of range 1-65535`
	if err == nil || err.Error() != want {
		t.Errorf("Parse = %v, want %s", err, want)
	}

	f, _ = ParseFile("/etc/osf.conf", []byte("OSF_STRICT = 1\nOSF_RING_SIZE = 3M\nkernel both * *:22\n"))
	_, err = Parse(f.Merge(nil, "x"))
	want = `osf: /etc/osf.conf:2: OSF_RING_SIZE="3M": not a power of two`
	if err == nil || err.Error() != want {
		t.Errorf("Parse = %v, want %s", err, want)
	}
	// The environment's value is reported without a file line.
	_, err = Parse(f.Merge([]string{"OSF_RING_SIZE=5"}, "x"))
	want = `osf: OSF_RING_SIZE="5": out of range 4K-64M`
	if err == nil || err.Error() != want {
		t.Errorf("Parse = %v, want %s", err, want)
	}

	f, _ = ParseFile("/etc/osf.conf", []byte("OSF_STRICT = 1\nkernel both * *:22\n"))
	c, err := Parse(f.Merge(nil, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Strict || c.ConfFile() != "/etc/osf.conf" || c.Where("OSF_STRICT", 0) != "/etc/osf.conf:1" ||
		c.Where(varRoutes, 1) != "/etc/osf.conf:2" || c.Where("OSF_SPIN_US", 0) != "" {
		t.Errorf("config %+v: file %q, strict at %q, rule 1 at %q", c, c.ConfFile(), c.Where("OSF_STRICT", 0), c.Where(varRoutes, 1))
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "osf.conf")
	if err := os.WriteFile(path, []byte("OSF_STRICT = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := Load([]string{"OSF_CONF=" + path}, "x")
	if err != nil || !slices.Contains(env, "OSF_STRICT=1") {
		t.Errorf("Load = %q, %v", env, err)
	}
	env, err = Load([]string{"OSF_CONF="}, "x")
	if err != nil || len(env) != 1 {
		t.Errorf("Load with OSF_CONF empty = %q, %v; want the environment unchanged", env, err)
	}
	missing := filepath.Join(dir, "nope")
	_, err = Load([]string{"OSF_CONF=" + missing}, "x")
	want := "osf: " + missing + ": cannot read: no such file or directory"
	if err == nil || err.Error() != want {
		t.Errorf("Load(missing) = %v, want %s", err, want)
	}
}

func TestExplainFromFile(t *testing.T) {
	f, err := ParseFile("/etc/osf.conf", []byte("OSF_TRANSPORT = shm\n[program psql]\nkernel both * *:5432\n[global]\noffload both * local\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(f.Merge(nil, "psql"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	q := Query{Role: Client, Program: "psql", Addr: netip.MustParseAddrPort("127.0.0.1:5432"), IsLocal: func(netip.Addr) bool { return true }}
	if err := c.Explain(&b, q); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"config file /etc/osf.conf (the environment overrides it)\n",
		"routes (/etc/osf.conf):\n",
		"  1  kernel both * *:5432    (/etc/osf.conf:3)\n",
		"OSF_TRANSPORT from /etc/osf.conf:1\n",
		"     decided by rule 1 at /etc/osf.conf:3\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Explain lacks %q:\n%s", want, b.String())
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		glob, name string
		want       bool
	}{
		{"*", "", true}, {"*", "nginx", true}, {"redis-*", "redis-server", true},
		{"redis-*", "redis", false}, {"?url", "curl", true}, {"?url", "url", false},
		{"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false}, {"nginx", "nginx", true},
	}
	for _, tt := range tests {
		if got := globMatch(tt.glob, tt.name); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v", tt.glob, tt.name, got)
		}
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(fileSample), "redis-server")
	f.Add([]byte("[program *]\nOSF_SPIN_US=1\n"), "x")
	f.Fuzz(func(t *testing.T, data []byte, prog string) {
		file, err := ParseFile("f", data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		_, _ = Parse(file.Merge(nil, prog))
	})
}
