package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root, seen from this package's directory.
const root = ".."

// pages are the Markdown files whose links and paths are checked.
func pages(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	return files
}

var (
	fence    = regexp.MustCompile("(?m)^```.*$")
	codeSpan = regexp.MustCompile("`[^`\n]+`")
	link     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	repoPath = regexp.MustCompile(`^\.?/?([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+)/?$`)
)

// split returns the prose of a page (fenced blocks and code spans blanked)
// and the code of it (fenced blocks and code spans).
func split(text string) (prose string, code []string) {
	var b strings.Builder
	parts := fence.Split(text, -1)
	for i, p := range parts {
		if i%2 == 1 { // inside a fence
			code = append(code, p)
			continue
		}
		code = append(code, codeSpan.FindAllString(p, -1)...)
		b.WriteString(codeSpan.ReplaceAllString(p, "``"))
	}
	return b.String(), code
}

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	// Headings inside fenced blocks are not headings.
	var out []string
	for i, p := range fence.Split(string(data), -1) {
		if i%2 == 0 {
			for _, m := range heading.FindAllStringSubmatch(p, -1) {
				out = append(out, slug(m[1]))
			}
		}
	}
	return out
}

func TestEveryRelativeLinkResolves(t *testing.T) {
	for _, file := range pages(t) {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		prose, _ := split(string(data))
		for _, m := range link.FindAllStringSubmatch(prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			name, anchor, _ := strings.Cut(target, "#")
			dest := file
			if name != "" {
				dest = filepath.Join(filepath.Dir(file), name)
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", file, target, dest)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !slices.Contains(anchors(t, dest), anchor) {
				t.Errorf("%s: link %q: %s has no heading #%s", file, target, dest, anchor)
			}
		}
	}
}

// TestEveryRepositoryPathExists checks the paths named in code spans and code
// blocks whose first segment is a top-level entry of the repository
// (scripts/…, deploy/…, internal/…): they must exist. Paths outside the
// repository (/tmp/…, bin/… that a build creates) are not checked.
func TestEveryRepositoryPathExists(t *testing.T) {
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	for _, e := range entries {
		top[e.Name()] = true
	}
	delete(top, "bin")
	checked := 0
	for _, file := range pages(t) {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		_, code := split(string(data))
		for _, c := range code {
			for _, word := range strings.FieldsFunc(c, func(r rune) bool {
				return unicode.IsSpace(r) || strings.ContainsRune("`'\"()[],;:=|<>", r)
			}) {
				m := repoPath.FindStringSubmatch(word)
				if m == nil || !top[strings.SplitN(m[1], "/", 2)[0]] || m[1] == "docs/s" { // docs/s: a rate
					continue
				}
				path := strings.TrimSuffix(m[1], "/...") // a Go package pattern names its directory
				if ignored(path) {
					continue // a build output (.gitignore), there once something is built
				}
				checked++
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					t.Errorf("%s: names %s, which does not exist", file, path)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d repository paths found in the pages; is the check still reading them?", checked)
	}
	t.Logf("%d repository paths checked", checked)
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Why the end-to-end ratio stays below 0.8 here": "why-the-end-to-end-ratio-stays-below-08-here",
		"One consumer: `--consumer NAME`":               "one-consumer---consumer-name",
		"Docker users: compose.yaml":                    "docker-users-composeyaml",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}

// ignored reports whether git ignores path: a build output such as a
// launcher's target directory.
func ignored(path string) bool {
	// The trailing slash lets a directory pattern (target-*/) match a
	// directory that is not built yet.
	cmd := exec.Command("git", "check-ignore", "-q", strings.TrimSuffix(path, "/")+"/")
	cmd.Dir = root
	return cmd.Run() == nil
}
