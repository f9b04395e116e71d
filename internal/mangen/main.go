// Command mangen writes osf's manual pages from their templates in
// docs/man (NAME.SECTION.in), filling in what is written once in the code:
// the variables and their defaults (policy.Vars) and the reasons a socket is
// not offloaded (policy.AllReasons). The same data makes README.md's
// variable table (VariablesMarkdown, checked by this package's tests), so
// the manual and the README cannot drift apart.
//
//	go run ./internal/mangen -o build/man -version 0.1.0 docs/man/*.in
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/osfproject/osf/internal/policy"
)

func main() {
	out := flag.String("o", "build/man", "output directory")
	version := flag.String("version", "", "osf version for the page footers")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "mangen:", err)
		os.Exit(1)
	}
	for _, in := range flag.Args() {
		b, err := os.ReadFile(in)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mangen:", err)
			os.Exit(1)
		}
		page := expand(string(b), *version)
		name := filepath.Join(*out, strings.TrimSuffix(filepath.Base(in), ".in"))
		if err := os.WriteFile(name, []byte(page), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "mangen:", err)
			os.Exit(1)
		}
	}
}

// expand fills the placeholders of a page template.
func expand(tmpl, version string) string {
	r := strings.NewReplacer(
		"@VERSION@", version,
		"@VARIABLES@", variablesRoff(),
		"@REASONS@", reasonsRoff(),
		"@CONF@", policy.DefaultConfFile,
	)
	return r.Replace(tmpl)
}

// roff escapes s for a text line of a manual page.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// shown returns the variables users set (not osf's own state variables).
func shown() []policy.Var {
	var vs []policy.Var
	for _, v := range policy.Vars() {
		if !strings.HasPrefix(v.Doc, "state,") {
			vs = append(vs, v)
		}
	}
	return vs
}

// defaultText is how the manual and the README show a variable's default.
func defaultText(v policy.Var) string {
	if v.Default == "" {
		if v.Name == "OSF_LOG_FILE" {
			return "standard error"
		}
		return "unset"
	}
	return v.Default
}

// variablesRoff lists the variables as tagged paragraphs.
func variablesRoff() string {
	var b strings.Builder
	for _, v := range shown() {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s (default: %s).\n", v.Name, roff(v.Doc), roff(defaultText(v)))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// reasonsRoff lists the reasons, as osfstat prints them, with their hints.
func reasonsRoff() string {
	var b strings.Builder
	for _, r := range policy.AllReasons() {
		text := strings.Replace(r.Describe(98765, ""), "98765", "N", 1)
		fmt.Fprintf(&b, ".TP\n.BR %d \" \" \"%s\"\n%s\n", int(r), strings.ReplaceAll(roff(text), `"`, `\(dq`), roff(r.Hint()))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// VariablesMarkdown is README.md's table of variables.
func VariablesMarkdown() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, v := range shown() {
		def := defaultText(v)
		if v.Default != "" {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Name, def, strings.ReplaceAll(v.Doc, "|", `\|`))
	}
	return b.String()
}
