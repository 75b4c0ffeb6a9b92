package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestDocsNameRealCommands reads every `searchsync …` command line in the
// code of README.md and docs/*.md (fenced blocks and code spans) and checks
// that its command, subcommand and --flags exist in the command tree.
func TestDocsNameRealCommands(t *testing.T) {
	app, err := kong.New(&CLI{}, kong.Name("searchsync"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	fence := regexp.MustCompile("(?m)^```.*$")
	span := regexp.MustCompile("`[^`\n]+`")
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var code []string
		for i, p := range fence.Split(string(data), -1) {
			if i%2 == 1 {
				code = append(code, strings.Split(p, "\n")...)
			} else {
				code = append(code, span.FindAllString(p, -1)...)
			}
		}
		for _, line := range code {
			for _, cmd := range commandLines(line) {
				checked++
				if msg := checkCommand(app.Model.Node, cmd); msg != "" {
					t.Errorf("%s: %q: %s", filepath.Base(f), strings.Join(cmd, " "), msg)
				}
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d searchsync command lines found; is the test still reading the pages?", checked)
	}
	t.Logf("%d command lines checked", checked)
}

// commandLines returns the words after a "searchsync" (or ".../searchsync")
// that begins a line or span, up to a comment or the end of the line. (A
// "searchsync" further in is prose: an error message that says "restart
// searchsync".)
func commandLines(line string) [][]string {
	words := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == '`' })
	if len(words) < 2 || (words[0] != "searchsync" && !strings.HasSuffix(words[0], "/searchsync")) {
		return nil
	}
	var rest []string
	for _, r := range words[1:] {
		if r == "#" {
			break
		}
		rest = append(rest, r)
	}
	if len(rest) == 0 || strings.HasPrefix(rest[0], "<") {
		return nil
	}
	return [][]string{rest}
}

// checkCommand resolves words against the command tree and returns what is
// wrong ("" when the command and its flags exist).
func checkCommand(root *kong.Node, words []string) string {
	nodes := []*kong.Node{root}
	var flags []string
	for i := 0; i < len(words); i++ {
		w := strings.Trim(words[i], "[](),.;:")
		switch {
		case w == "-c":
			i++ // its value
		case strings.HasPrefix(w, "--"):
			flags = append(flags, strings.SplitN(strings.TrimPrefix(w, "--"), "=", 2)[0])
		case len(nodes) > 0 && len(nodes[0].Children) > 0:
			var next []*kong.Node
			alts := strings.Split(strings.ReplaceAll(w, `\|`, "|"), "|")
			for _, n := range nodes {
				for _, alt := range alts {
					for _, c := range n.Children {
						if c.Name == alt {
							next = append(next, c)
						}
					}
				}
			}
			if len(next) == 0 { // an argument: the default subcommand takes it
				for _, n := range nodes {
					for _, c := range n.Children {
						if c.Tag != nil && c.Tag.Default != "" {
							next = append(next, c)
						}
					}
				}
			}
			if len(next) == 0 {
				return "no such command " + w
			}
			nodes = next
		}
	}
	for _, f := range flags {
		if f == "help" || f == "version" {
			continue
		}
		found := false
		for _, n := range nodes {
			for p := n; p != nil && !found; p = p.Parent {
				found = slices.ContainsFunc(p.Flags, func(fl *kong.Flag) bool { return fl.Name == f })
			}
		}
		if !found {
			return "no flag --" + f
		}
	}
	return ""
}
