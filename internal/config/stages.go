package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Stage is a check of the configuration that needs packages this one cannot
// import: cmd/searchsync loads the index definitions and projections the
// search consumers name (packages mapping and projections, which import
// this one through indexer) and checks the consumers' indexes against them.
// Load runs the stages after Validate, even when the decoder or Validate
// found problems, on the values they could read; a stage asks Reported to
// leave out what an earlier stage already found wrong.
type Stage func(c *Config, r *Report)

// Stages makes Load run these checks after its own (see Stage) and report
// their problems with its own, in one error.
func Stages(s ...Stage) Option {
	return func(c *Config) { c.stages = append(c.stages, s...) }
}

// Report collects the problems a Stage finds.
type Report struct{ v *validator }

// Add reports a problem of key of the configuration file, at the key's line
// (consumers[0].search.indexes[1]).
func (r *Report) Add(key, reason string) { r.v.add(key, reason) }

// AddIn reports a problem in a file the configuration names (an index
// definition, a projection file): at line of file (0: unknown) and key of
// that file ("": the file as a whole).
func (r *Report) AddIn(file string, line int, key, reason string) {
	r.v.errs = append(r.v.errs, &Error{File: file, Line: line, Key: key, Reason: reason})
}

// Reported reports whether an earlier stage found a problem with key, a
// parent of it or a key under it, or could not read one of them: a stage
// that would only repeat it leaves the key alone.
func (r *Report) Reported(key string) bool {
	related := func(k string) bool {
		return k != "" && (k == key || under(key, k) || under(k, key))
	}
	for k := range r.v.c.unread {
		if related(k) {
			return true
		}
	}
	for _, e := range r.v.errs {
		if e.File == r.v.c.file && related(e.Key) {
			return true
		}
	}
	return false
}

// under reports whether key is below parent (consumers[0].name is below
// consumers[0] and consumers).
func under(key, parent string) bool {
	rest, ok := strings.CutPrefix(key, parent)
	return ok && rest != "" && (rest[0] == '.' || rest[0] == '[')
}

// DidYouMean is ` (did you mean "x"?)` when x of known is a likely typo of
// name (at most two edits away, one for short names), else "".
func DidYouMean(name string, known []string) string {
	if near := closest(name, known); near != "" {
		return fmt.Sprintf(" (did you mean %q?)", near)
	}
	return ""
}

// LineOf is the line of key (projections[0].fields[1].type) in a YAML or
// JSON document, or of its closest present parent; 0 when there is none or
// data does not parse.
func LineOf(data []byte, key string) int {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return 0
	}
	k := keyLines{}
	k.indexNode(&root, "")
	return k.line(key)
}
