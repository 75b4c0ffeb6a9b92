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

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"go.yaml.in/yaml/v3"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
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
//   - every other block is a configuration file and must validate: the
//     test supplies database.url when it has none, sets every env:NAME it
//     names, creates the directories of indexes.definitions and
//     indexes.projections, and points every file it names (ca_file,
//     cert_file, key_file, creds_file, nkey_seed_file, file:PATH secrets) at
//     a generated file of the right kind, so a documented path need not
//     exist on the machine that runs the test.
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
				// id:secret fits every kind of secret (an API key wants it).
				t.Setenv(m[1], "docs:"+strings.ToLower(m[1]))
			}
			if first != "# other" {
				repl := docFiles(t, &root)
				for k, d := range variants {
					for from, to := range repl {
						d = bytes.ReplaceAll(d, []byte(from), []byte(to))
					}
					variants[k] = d
				}
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

// docFiles makes a file of the right kind for every file a block names and
// returns the replacements (documented path → generated path).
func docFiles(t *testing.T, root *yaml.Node) map[string]string {
	t.Helper()
	dir := t.TempDir()
	var ca *testenv.CA
	var cert, key string
	pair := func() {
		if ca == nil {
			ca = testenv.NewCA(t, "docs CA")
			cert, key = ca.Client(t, "searchsync")
		}
	}
	write := func(content []byte) string {
		f, err := os.CreateTemp(dir, "doc")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(content); err != nil {
			t.Fatal(err)
		}
		return f.Name()
	}
	repl := map[string]string{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i].Value, n.Content[i+1]
				if v.Kind != yaml.ScalarNode || v.Value == "" || repl[v.Value] != "" {
					continue
				}
				switch k {
				case "ca_file":
					pair()
					repl[v.Value] = ca.CertFile
				case "cert_file":
					pair()
					repl[v.Value] = cert
				case "key_file":
					pair()
					repl[v.Value] = key
				case "creds_file":
					repl[v.Value] = write(docCreds(t))
				case "nkey_seed_file":
					u, _ := nkeys.CreateUser()
					seed, _ := u.Seed()
					repl[v.Value] = write(seed)
				}
			}
		}
		if p, ok := strings.CutPrefix(n.Value, "file:"); ok && n.Kind == yaml.ScalarNode && repl[n.Value] == "" {
			repl[n.Value] = "file:" + write([]byte("docs:"+filepath.Base(p)+"\n"))
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
	return repl
}

// docCreds is a credentials file: a user JWT signed by a new account and
// the user's seed.
func docCreds(t *testing.T) []byte {
	t.Helper()
	acct, _ := nkeys.CreateAccount()
	u, _ := nkeys.CreateUser()
	pub, _ := u.PublicKey()
	tok, err := jwt.NewUserClaims(pub).Encode(acct)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := u.Seed()
	b, err := jwt.FormatUserConfig(tok, seed)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
