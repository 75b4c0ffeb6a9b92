package config

import (
	"fmt"
	"net"
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

// unknownField is the decoder's message for a key the struct lacks.
var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// decodeErrors turns the decoder's messages into Errors that name the key: the
// key on the message's line whose name (unknown field) or value (wrong type)
// the message mentions, else the first key on that line.
func (c *Config) decodeErrors(root *yaml.Node, msgs []string) []error {
	var errs []error
	for _, m := range msgs {
		e := &Error{File: c.file, Reason: m}
		if sm := typeErrorLine.FindStringSubmatch(m); sm != nil {
			e.Line, _ = strconv.Atoi(sm[1])
			e.Reason = sm[2]
			if um := unknownField.FindStringSubmatch(sm[2]); um != nil {
				e.Reason = fmt.Sprintf("unknown field %q", um[1])
			}
			e.Key = keyAt(root, e.Line, sm[2])
		}
		errs = append(errs, e)
	}
	return errs
}

// keyAt finds the path of the key on line whose name or scalar value appears
// in msg, or the first key on line, or "".
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
