package config_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/projections"
)

// docBlock is one ```yaml block of a Markdown file.
type docBlock struct {
	file string // the Markdown file
	line int    // the line of the block's first YAML line
	text string
}

// yamlBlocks returns every ```yaml block of the Markdown files.
func yamlBlocks(t *testing.T, files []string) []docBlock {
	t.Helper()
	var blocks []docBlock
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cur *docBlock
		var buf strings.Builder
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			l := sc.Text()
			switch {
			case cur == nil && strings.TrimSpace(l) == "```yaml":
				cur = &docBlock{file: f, line: n + 1}
				buf.Reset()
			case cur != nil && strings.TrimSpace(l) == "```":
				cur.text = buf.String()
				blocks = append(blocks, *cur)
				cur = nil
			case cur != nil:
				buf.WriteString(l + "\n")
			}
		}
		if cur != nil {
			t.Errorf("%s:%d: ```yaml block is not closed", f, cur.line-1)
		}
	}
	return blocks
}

// restyle sets the style of every collection under n (flow or block) and
// drops comments, which flow style cannot carry.
func restyle(n *yaml.Node, style yaml.Style) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = style
	}
	for _, c := range n.Content {
		restyle(c, style)
	}
}

var envRef = regexp.MustCompile(`env:([A-Za-z_][A-Za-z0-9_]*)`)

// TestDocumentedYAML checks every ```yaml block of README.md and docs/*.md,
// as written, re-rendered in block style and re-rendered in flow style:
//
//   - a block whose first line is "# fragment" is part of a configuration
//     file that does not stand alone (a route without its consumer): it must
//     decode strictly (no unknown key, no wrong type) but is not validated;
//   - a block whose first line is "# other" is not a searchsync file
//     (compose, Kubernetes): it must be YAML;
//   - a block with a top-level projections key is a projection file;
//   - every other block is a configuration file (database.url is supplied
//     when it has none, every env:NAME it names is set, and the directories
//     of indexes.definitions and indexes.projections exist) and must
//     validate.
func TestDocumentedYAML(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../README.md"}, files...)
	blocks := yamlBlocks(t, files)
	if len(blocks) == 0 {
		t.Fatal("no ```yaml block found in README.md and docs/*.md")
	}
	for _, b := range blocks {
		name := fmt.Sprintf("%s:%d", filepath.Base(b.file), b.line)
		t.Run(name, func(t *testing.T) {
			var root yaml.Node
			if err := yaml.Unmarshal([]byte(b.text), &root); err != nil {
				t.Fatalf("%s:%d: not YAML: %v", b.file, b.line, err)
			}
			first, _, _ := strings.Cut(b.text, "\n")
			first = strings.TrimSpace(first)
			variants := map[string][]byte{"as written": []byte(b.text)}
			for style, s := range map[string]yaml.Style{"block": 0, "flow": yaml.FlowStyle} {
				var n yaml.Node
				if err := yaml.Unmarshal([]byte(b.text), &n); err != nil {
					t.Fatal(err)
				}
				restyle(&n, s)
				out, err := yaml.Marshal(&n)
				if err != nil {
					t.Fatalf("render %s: %v", style, err)
				}
				variants[style] = out
			}
			for _, m := range envRef.FindAllStringSubmatch(b.text, -1) {
				t.Setenv(m[1], "docs-"+strings.ToLower(m[1]))
			}
			for variant, data := range variants {
				var err error
				switch {
				case first == "# other":
					var v any
					err = yaml.Unmarshal(data, &v)
				case first == "# fragment":
					dec := yaml.NewDecoder(bytes.NewReader(data))
					dec.KnownFields(true)
					err = dec.Decode(&config.Config{})
				case topKey(&root, "projections"):
					_, err = projections.Parse(name, data)
				default:
					err = loadDoc(t, &root, data)
				}
				if err != nil {
					t.Errorf("%s:%d (%s):\n%s\n%v", b.file, b.line, variant, data, err)
				}
			}
		})
	}
}

func topKey(root *yaml.Node, key string) bool {
	return lookup(root, key) != nil
}

// lookup finds the value of a dotted key path under a document node.
func lookup(root *yaml.Node, path string) *yaml.Node {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, k := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// loadDoc loads a documented configuration as searchsync run would, from a
// file in a fresh directory, with only the environment the block implies.
func loadDoc(t *testing.T, root *yaml.Node, data []byte) error {
	dir := t.TempDir()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || strings.HasPrefix(k, "SEARCHSYNC_") {
			t.Setenv(k, "")
		}
	}
	if lookup(root, "database.url") == nil {
		t.Setenv("DATABASE_URL", "postgres://docs@127.0.0.1:5432/docs")
	}
	var dirs []string
	if n := lookup(root, "indexes.definitions"); n != nil {
		dirs = append(dirs, n.Value)
	}
	if n := lookup(root, "indexes.projections"); n != nil {
		for _, c := range n.Content {
			dirs = append(dirs, c.Value)
		}
	}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := filepath.Join(dir, "searchsync.yaml")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(f)
	return err
}
