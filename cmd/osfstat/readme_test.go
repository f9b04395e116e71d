package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/policy"
)

var update = flag.Bool("update", false, "rewrite the list of reasons in README.md from internal/policy")

// The README's list of reasons sits between these markers.
const (
	reasonsBegin = "<!-- BEGIN reasons: generated from internal/policy by `go test ./cmd/osfstat -run TestREADMEReasons -update`; do not edit by hand -->\n"
	reasonsEnd   = "<!-- END reasons -->\n"
)

// reasonsTable renders every reason in policy.AllReasons as a Markdown
// table: code, what osfstat and osfrun --explain say, what to do.
func reasonsTable() string {
	var b strings.Builder
	b.WriteString("| code | osfstat says | what to do |\n|---:|---|---|\n")
	for _, r := range policy.AllReasons() {
		// Describe fills in the rule number where the text has one;
		// the README shows it as N.
		text := strings.Replace(r.Describe(98765, ""), "98765", "N", 1)
		fmt.Fprintf(&b, "| %d | %s | %s |\n", int(r), mdCell(text), mdCell(r.Hint()))
	}
	return b.String()
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// TestREADMEReasons checks that README.md's section "Why is my connection
// not offloaded?" lists every reason osf records, in the words osfstat
// prints, with its hint: the list is generated from internal/policy, and
// -update regenerates it.
func TestREADMEReasons(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	sec := strings.Index(readme, "## Why is my connection not offloaded?\n")
	if sec < 0 {
		t.Fatalf("%s has no section \"## Why is my connection not offloaded?\"", path)
	}
	i := strings.Index(readme[sec:], reasonsBegin)
	j := strings.Index(readme[sec:], reasonsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: the section has no generated list between\n%s%s", path, reasonsBegin, reasonsEnd)
	}
	i, j = sec+i+len(reasonsBegin), sec+j
	want := reasonsTable()
	if *update {
		if err := os.WriteFile(path, []byte(readme[:i]+want+readme[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := readme[i:j]; got != want {
		t.Errorf("%s: the list of reasons is out of date; run\n\tgo test ./cmd/osfstat -run TestREADMEReasons -update\n--- got:\n%s--- want:\n%s", path, got, want)
	}
	for _, r := range policy.AllReasons() {
		if !strings.Contains(readme[i:j], fmt.Sprintf("| %d | ", int(r))) {
			t.Errorf("%s: reason %d (%s) is not listed", path, int(r), r)
		}
	}
}
