package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// DefaultConfFile is the configuration file osf reads when OSF_CONF is unset.
const DefaultConfFile = "/etc/osf.conf"

// Variables of the configuration file.
const (
	// varConf names the configuration file; empty means none.
	varConf = "OSF_CONF"
	// varOrigin is set by libosf.so's constructor (and by Load) in the
	// snapshot, never by users: which file was read and the lines the
	// file's values came from. Its value is the path, then one line per
	// variable taken from the file: "NAME LINE..." (OSF_ROUTES lists the
	// line of each rule).
	varOrigin = "OSF_CONF_ORIGIN"
)

// FileError reports a malformed line of the configuration file. It wraps
// ErrMalformed.
type FileError struct {
	// Path is the file's path and Line the 1-based line number; Line is 0
	// when the file could not be read.
	Path string
	Line int
	// Text is the offending line, without comments and surrounding blanks.
	Text string
	// Reason says what is wrong.
	Reason string
}

// Error returns the message osf prints for e, for example
//
//	osf: /etc/osf.conf:7: unknown variable OSF_SPIN: "OSF_SPIN = 5"
func (e *FileError) Error() string {
	if e.Line == 0 {
		return "osf: " + e.Path + ": " + e.Reason
	}
	return "osf: " + e.Path + ":" + strconv.Itoa(e.Line) + ": " + e.Reason + ": " + strconv.Quote(e.Text)
}

// Unwrap returns ErrMalformed.
func (e *FileError) Unwrap() error { return ErrMalformed }

// File is a parsed configuration file (see the package documentation for its
// syntax).
type File struct {
	// Path is where the file was read from.
	Path  string
	lines []fileLine
	rules bool // the file has at least one rule line
}

// fileLine is one meaningful line of a configuration file.
type fileLine struct {
	line    int
	section string // program glob of the enclosing section; "" is global
	name    string // variable name; "" for a rule line
	value   string // the variable's value, or the rule's text
}

// inFile reports whether variable name may be set in the configuration
// file: every variable but the rules (which are lines of their own), the
// file's own name, osfrun's library and osf's state variables.
func inFile(name string) bool {
	switch name {
	case varRoutes, varConf, varOrigin, "OSF_LIB", "OSF_FDTABLE":
		return false
	}
	return known(name)
}

// fileBlank reports whether c is a blank in the configuration file.
func fileBlank(c rune) bool { return c == ' ' || c == '\t' || c == '\r' }

// ParseFile parses the configuration file data read from path. Every line is
// checked, whatever section it is in; the first malformed one gives a
// *FileError. Values are checked later, by Parse, once the environment and
// the file are merged.
func ParseFile(path string, data []byte) (*File, error) {
	f := &File{Path: path}
	section := ""
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		text := stripComment(raw)
		if text == "" {
			continue
		}
		bad := func(reason string) error { return &FileError{Path: path, Line: n, Text: text, Reason: reason} }
		switch {
		case strings.HasPrefix(text, "["):
			glob, err := parseSection(text)
			if err != nil {
				return nil, bad(err.Error())
			}
			section = glob
		case strings.HasPrefix(text, "OSF_"):
			name, value, ok := strings.Cut(text, "=")
			name, value = strings.TrimFunc(name, fileBlank), strings.TrimFunc(value, fileBlank)
			switch {
			case !ok:
				return nil, bad("missing '=', want OSF_NAME = value")
			case !inFile(name):
				if name == varRoutes {
					return nil, bad("write route rules as lines of their own (offload|kernel ...), not OSF_ROUTES")
				}
				return nil, bad("unknown variable " + name)
			}
			f.lines = append(f.lines, fileLine{line: n, section: section, name: name, value: value})
		case isRuleLine(text):
			if strings.Contains(text, ";") {
				return nil, bad("one rule per line (';' is not allowed in the file)")
			}
			f.lines = append(f.lines, fileLine{line: n, section: section, value: text})
			f.rules = true
		default:
			return nil, bad("want OSF_NAME = value, a rule (offload|kernel ...), [program GLOB] or [global]")
		}
	}
	return f, nil
}

// stripComment returns line without a comment ('#' at its start or after a
// blank) and surrounding blanks.
func stripComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || fileBlank(rune(line[i-1]))) {
			line = line[:i]
			break
		}
	}
	return strings.TrimFunc(line, fileBlank)
}

// isRuleLine reports whether text starts with a rule's action.
func isRuleLine(text string) bool {
	word, _, _ := strings.Cut(text, " ")
	word, _, _ = strings.Cut(word, "\t")
	return word == "offload" || word == "kernel" || word == "gateway"
}

// parseSection parses "[program GLOB]" (returning GLOB) or "[global]"
// (returning "").
func parseSection(text string) (string, error) {
	if !strings.HasSuffix(text, "]") {
		return "", errors.New("missing ']'")
	}
	f := strings.FieldsFunc(text[1:len(text)-1], fileBlank)
	switch {
	case len(f) == 1 && f[0] == "global":
		return "", nil
	case len(f) != 2 || f[0] != "program":
		return "", errors.New("want [program GLOB] or [global]")
	}
	for _, c := range f[1] {
		if !sectionGlobChar(c) {
			return "", fmt.Errorf("character %q in program glob, want letters, digits, . _ + @ : - and the wildcards * ?", c)
		}
	}
	return f[1], nil
}

// sectionGlobChar reports whether c may appear in a section's program glob:
// the characters for which path.Match and the C library's fnmatch agree.
func sectionGlobChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.ContainsRune("._+@:-*?", c)
}

// applies reports whether l is in effect for program prog.
func (l *fileLine) applies(prog string) bool {
	return l.section == "" || globMatch(l.section, prog)
}

// globMatch matches a section glob (only * and ? are special) against name,
// byte by byte as fnmatch does in the C locale.
func globMatch(glob, name string) bool {
	for len(glob) > 0 {
		switch glob[0] {
		case '*':
			for i := len(name); i >= 0; i-- {
				if globMatch(glob[1:], name[i:]) {
					return true
				}
			}
			return false
		case '?':
			if name == "" {
				return false
			}
			glob, name = glob[1:], name[1:]
		default:
			if name == "" || name[0] != glob[0] {
				return false
			}
			glob, name = glob[1:], name[1:]
		}
	}
	return name == ""
}

// setting is a variable's value from the file, with its line.
type setting struct {
	value string
	lines []int
}

// Merge returns env with the file's settings for program prog added: every
// variable the file sets and env lacks, and OSF_ROUTES from the rule lines
// that apply to prog when the file has rule lines and env lacks OSF_ROUTES;
// then the OSF_CONF_ORIGIN entry that tells Parse where each value came
// from. A setting in a [program] section that matches prog takes precedence
// over a global one; among equals the later line wins. Rules apply in file
// order, skipping sections that do not match prog.
func (f *File) Merge(env []string, prog string) []string {
	values := osfValues(env)
	got := make(map[string]setting)
	level := make(map[string]bool) // true: from a matching section
	var names []string
	var rules []string
	var ruleLines []int
	for i := range f.lines {
		l := &f.lines[i]
		if !l.applies(prog) {
			continue
		}
		if l.name == "" {
			rules = append(rules, l.value)
			ruleLines = append(ruleLines, l.line)
			continue
		}
		inSection := l.section != ""
		if _, ok := got[l.name]; !ok {
			names = append(names, l.name)
		} else if level[l.name] && !inSection {
			continue
		}
		got[l.name] = setting{value: l.value, lines: []int{l.line}}
		level[l.name] = inSection
	}
	if f.rules {
		names = append(names, varRoutes)
		got[varRoutes] = setting{value: strings.Join(rules, "\n"), lines: ruleLines}
	}
	out := slices.Clone(env)
	origin := f.Path
	for _, name := range names {
		if _, set := values[name]; set {
			continue
		}
		s := got[name]
		out = append(out, name+"="+s.value)
		origin += "\n" + name
		for _, n := range s.lines {
			origin += " " + strconv.Itoa(n)
		}
	}
	return append(out, varOrigin+"="+origin)
}

// Load returns env merged with the configuration file for program prog, as
// libosf.so's constructor merges them: the file named by OSF_CONF in env, or
// DefaultConfFile when OSF_CONF is unset (a missing default file is no
// error; an empty OSF_CONF means no file). A file that cannot be read or is
// malformed gives a *FileError.
func Load(env []string, prog string) ([]string, error) {
	path, set := osfValues(env)[varConf]
	switch {
	case !set:
		path = DefaultConfFile
	case path == "":
		return env, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !set && errors.Is(err, fs.ErrNotExist) {
			return env, nil
		}
		return nil, &FileError{Path: path, Reason: "cannot read: " + errReason(err)}
	}
	f, err := ParseFile(path, data)
	if err != nil {
		return nil, err
	}
	return f.Merge(env, prog), nil
}

// errReason returns the system error message in err, without the path.
func errReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// origin is where configuration values came from: parsed from
// OSF_CONF_ORIGIN.
type origin struct {
	path  string
	lines map[string][]int
}

// parseOrigin parses an OSF_CONF_ORIGIN value; a malformed one (never
// written by osf) gives an origin without lines.
func parseOrigin(v string) *origin {
	first, rest, _ := strings.Cut(v, "\n")
	o := &origin{path: first, lines: make(map[string][]int)}
	for entry := range strings.SplitSeq(rest, "\n") {
		f := strings.Fields(entry)
		if len(f) == 0 {
			continue
		}
		var lines []int
		for _, s := range f[1:] {
			n, err := strconv.Atoi(s)
			if err != nil {
				return &origin{path: first}
			}
			lines = append(lines, n)
		}
		o.lines[f[0]] = lines
	}
	return o
}

// where returns "path:line" for variable name (for OSF_ROUTES, of the
// rule-th rule, counting from 1), or "" when the value did not come from the
// file.
func (o *origin) where(name string, rule int) string {
	if o == nil {
		return ""
	}
	lines, ok := o.lines[name]
	if !ok {
		return ""
	}
	i := 0
	if name == varRoutes {
		i = rule - 1
	}
	if i < 0 || i >= len(lines) {
		return o.path
	}
	return o.path + ":" + strconv.Itoa(lines[i])
}
