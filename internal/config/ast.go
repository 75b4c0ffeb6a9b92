package config

import (
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// keyLines maps every key of the parsed file, as a dotted path with [i]
// indexes (consumers[0].webhook.url), to its 1-based line.
type keyLines map[string]int

// line returns the line of key, or of its closest present parent, or 0 when
// there is no file.
func (k keyLines) line(key string) int {
	for ; key != ""; key = parentKey(key) {
		if n, ok := k[key]; ok {
			return n
		}
	}
	return 0
}

// indexNode records the line of every key under n, which is at path.
func (k keyLines) indexNode(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			k.indexNode(c, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			if _, seen := k[p]; !seen {
				k[p] = n.Content[i].Line
			}
			k.indexNode(n.Content[i+1], p)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			k[p] = c.Line
			k.indexNode(c, p)
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			k.indexNode(n.Alias, path)
		}
	}
}

// typeErrorLine splits one message of a *yaml.TypeError ("line 5: cannot
// unmarshal !!str `many` into int").
var typeErrorLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// unknownField is the decoder's message for a key the struct lacks, with
// the struct's type.
var unknownField = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)

// wrongType is the decoder's message for a value of the wrong kind: the
// YAML tag, the value, the Go type.
// The value is left out for a list or a mapping.
var wrongType = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")

// plainTypeError says what a value of Go type goType must look like.
func plainTypeError(tag, value, goType string) string {
	got := fmt.Sprintf("%q", value)
	if tag == "map" || tag == "seq" {
		got = map[string]string{"map": "a mapping", "seq": "a list"}[tag]
	}
	switch goType {
	case "time.Duration":
		return got + " is not a duration: write one with its unit, such as 500ms, 10s or 5m"
	case "int", "int32", "int64", "uint", "uint32", "uint64":
		return got + " is not a whole number"
	case "float64", "float32":
		return got + " is not a number"
	case "bool":
		return got + " is not true or false"
	case "string":
		return got + " is not a single value (quote it if it is meant as text)"
	}
	if strings.HasPrefix(goType, "[]") {
		return got + " is not a list: write [a, b] or one \"- item\" per line"
	}
	return fmt.Sprintf("%s does not fit here (expected %s)", got, goType)
}

// fieldsOf is the YAML keys of the configuration's struct type named
// typeName ("config.Relay"), nil when there is none.
func fieldsOf(typeName string) []string {
	var out []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		if t.String() == typeName {
			for f := range t.Fields() {
				if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
					out = append(out, name)
				}
			}
			return
		}
		for f := range t.Fields() {
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[Config]())
	return out
}

// closest is the name of names nearest to s when it is a likely typo:
// at most two edits away (one for short names), else "".
func closest(s string, names []string) string {
	best, bestD := "", 3
	if len(s) <= 4 {
		bestD = 2
	}
	for _, n := range names {
		if d := editDistance(strings.ToLower(s), n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b: the
// Levenshtein distance, with two adjacent letters swapped ("naem") one edit.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// decodeErrors reports the decoder's messages as Errors that name the key:
// the key on the message's line whose name (unknown field) or value (wrong
// type) the message mentions, else the first key on that line. It marks
// the keys whose value later checks cannot trust (Config.unread): the key of
// a value of the wrong type, and the key a misspelt one probably meant.
func (v *validator) decodeErrors(root *yaml.Node, msgs []string) {
	for _, m := range msgs {
		e := &Error{File: v.c.file, Reason: m}
		if sm := typeErrorLine.FindStringSubmatch(m); sm != nil {
			e.Line, _ = strconv.Atoi(sm[1])
			e.Reason = sm[2]
			e.Key = keyAt(root, e.Line, sm[2])
			if um := unknownField.FindStringSubmatch(sm[2]); um != nil {
				e.Reason = fmt.Sprintf("unknown field %q", um[1])
				if near := closest(um[1], fieldsOf(um[2])); near != "" {
					e.Reason += fmt.Sprintf(" (did you mean %q?)", near)
					v.unread(joinKey(parentKey(e.Key), near))
				}
			} else if tm := wrongType.FindStringSubmatch(sm[2]); tm != nil {
				e.Reason = plainTypeError(tm[1], tm[2], tm[3])
				if e.Key != "" {
					v.unread(e.Key)
				}
			}
		}
		v.errs = append(v.errs, e)
	}
}

// joinKey is the key name under parent ("" for the top level).
func joinKey(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// keyAt finds the path of the key on line whose name or scalar value appears
// in msg, or whose list or mapping value msg names and starts on line, or
// the first key on line, or "".
func keyAt(root *yaml.Node, line int, msg string) string {
	var first, best string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, ch := range n.Content {
				walk(ch, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key, val := n.Content[i], n.Content[i+1]
				p := key.Value
				if path != "" {
					p = path + "." + p
				}
				if key.Line == line {
					if first == "" {
						first = p
					}
					if best == "" && (strings.Contains(msg, "field "+key.Value+" ") ||
						(val.Kind == yaml.ScalarNode && strings.Contains(msg, "`"+val.Value+"`"))) {
						best = p
					}
				}
				// A list or mapping of the wrong type: the message gives
				// the line of the value, not of its key.
				if best == "" && val.Line == line && ((val.Kind == yaml.SequenceNode && strings.Contains(msg, "!!seq ")) ||
					(val.Kind == yaml.MappingNode && strings.Contains(msg, "!!map "))) {
					best = p
				}
				walk(val, p)
			}
		case yaml.SequenceNode:
			for i, ch := range n.Content {
				walk(ch, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(root, "")
	if best != "" {
		return best
	}
	return first
}

func parentKey(k string) string {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == '.' || k[i] == '[' {
			return k[:i]
		}
	}
	return ""
}

func splitHostPort(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, &net.AddrError{Err: "bad port", Addr: s}
	}
	return host, n, nil
}
