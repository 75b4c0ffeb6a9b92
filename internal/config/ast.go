package config

import (
	"net"
	"strconv"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// astFile finds the line of a key in the parsed YAML file.
type astFile struct{ f *ast.File }

// line returns the 1-based line of key (a dotted path with [i] indexes), or of
// its closest present parent, or 0 when there is no file.
func (a *astFile) line(key string) int {
	if a == nil || a.f == nil {
		return 0
	}
	for k := key; k != ""; k = parentKey(k) {
		p, err := yaml.PathString("$." + k)
		if err != nil {
			continue
		}
		n, err := p.FilterFile(a.f)
		if err == nil && n != nil && n.GetToken() != nil {
			return n.GetToken().Position.Line
		}
	}
	return 0
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
