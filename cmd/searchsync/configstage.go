package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

// indexStage is the last stage of loading the configuration for run and
// demo (config.Stage): it loads what the search consumers load at start-up
// — the index definitions and the projections — and checks the consumers'
// indexes against them, so that their problems come with the file's others,
// with file and line, before anything connects. Every definition file and
// projection file is read, past a bad one. It does nothing without a search
// consumer, as run then loads neither.
func indexStage(examples exampleSet) config.Stage {
	return func(c *config.Config, r *config.Report) {
		var aliases []string // of the search consumers
		for _, cc := range c.Consumers {
			if cc.Type == "search" && cc.Search != nil {
				aliases = append(aliases, cc.Search.Indexes...)
			}
		}
		if len(aliases) == 0 {
			return
		}
		defs, unsure := stageDefs(c, r)
		set, origin := stageProjections(c, r, examples)
		for i, cc := range c.Consumers {
			if cc.Type != "search" || cc.Search == nil {
				continue
			}
			for j, ix := range cc.Search.Indexes {
				key := fmt.Sprintf("consumers[%d].search.indexes[%d]", i, j)
				if r.Reported(key) {
					continue
				}
				if defs != nil && defs[ix] == nil {
					if !unsure[ix] {
						names := defs.Names()
						r.Add(key, fmt.Sprintf("names unknown index %q%s: the index definitions are %s",
							ix, config.DidYouMean(ix, names), strings.Join(names, ", ")))
					}
					continue
				}
				if set != nil && !slices.Contains(set.Indexes(), ix) {
					r.Add(key, fmt.Sprintf("no projection writes index %q (configure indexes.projections or indexes.examples)", ix))
				}
			}
		}
		if set == nil {
			return
		}
		if err := set.Check(); err != nil {
			name := ""
			if m := checkErr.FindStringSubmatch(err.Error()); m != nil {
				name, _ = strconv.Unquote(`"` + m[1] + `"`)
			}
			origin.report(r, name, "go", err.Error())
		}
		if defs == nil {
			return
		}
		// Declared field types must fit the mappings (search.New checks it).
		for _, p := range set.Projections() {
			def := defs[p.Index]
			if def == nil || !slices.Contains(aliases, p.Index) {
				continue
			}
			for k, f := range p.Fields {
				if err := def.CheckFieldType(f.To, string(f.Type)); err != nil {
					origin.report(r, p.Name, fmt.Sprintf("fields[%d].type", k), fmt.Sprintf("projection %q: %v", p.Name, err))
				}
			}
		}
	}
}

// stageDefs loads the index definitions as loadDefs does (the
// embedded ones, overridden and extended by the files of
// indexes.definitions), reporting every bad file. It returns those that
// loaded and the aliases the bad files may define (their names without
// extension, the default alias); nil when the directory is unusable.
func stageDefs(c *config.Config, r *config.Report) (mapping.Defs, map[string]bool) {
	if r.Reported("indexes.definitions") {
		return nil, nil
	}
	defs, err := mapping.Load("") // the embedded ones
	if err != nil {
		r.Add("indexes", err.Error())
		return nil, nil
	}
	if c.Indexes.Definitions == "" {
		return defs, nil
	}
	dir := c.Path(c.Indexes.Definitions)
	files, err := mapping.DefinitionFiles(dir)
	if err != nil {
		r.Add("indexes.definitions", err.Error())
		return nil, nil
	}
	unsure, seen := map[string]bool{}, map[string]string{}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err == nil {
			var d *mapping.Def
			if d, err = mapping.Parse(p, data); err == nil {
				if prev, dup := seen[d.Alias]; dup {
					r.AddIn(p, config.LineOf(data, "alias"), "alias", fmt.Sprintf("%q is also defined by %s", d.Alias, prev))
				}
				seen[d.Alias] = p
				defs[d.Alias] = d
				continue
			}
		}
		line, key, reason := defProblem(p, data, err)
		r.AddIn(p, line, key, reason)
		name := filepath.Base(p)
		unsure[strings.TrimSuffix(name, filepath.Ext(name))] = true
	}
	return defs, unsure
}

// The forms of mapping.Parse's errors: the YAML decoder's "[line:column]
// message" followed by the source, and check's "key: reason".
var (
	yamlPos   = regexp.MustCompile(`^\[(\d+):\d+\] ([^\n]*)`)
	defKeyErr = regexp.MustCompile(`^([a-z_.]+): (.*)$`)
)

// defProblem turns an error of mapping.Parse(file, data) into a line, a key
// and a reason.
func defProblem(file string, data []byte, err error) (int, string, string) {
	if ute, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return lineAt(data, ute.Offset), ute.Field, fmt.Sprintf("is a JSON %s, where %s is expected", ute.Value, jsonKind(ute.Type))
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return lineAt(data, se.Offset), "", se.Error() + " (a JSON syntax error: nothing else in the file was checked)"
	}
	msg := strings.TrimPrefix(err.Error(), "index definition "+file+": ")
	if m := yamlPos.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, "", m[2]
	}
	if m := defKeyErr.FindStringSubmatch(msg); m != nil {
		return config.LineOf(data, m[1]), m[1], m[2]
	}
	return 0, "", msg
}

// jsonKind says in words what a JSON value for Go type t looks like.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// lineAt is the line of byte offset off of data.
func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return 1 + strings.Count(string(data[:off]), "\n")
}

// projectionOrigin is where each projection (by name) was declared, to
// point a later complaint about it at its file and line.
type projectionOrigin map[string]projectionAt

type projectionAt struct {
	file string
	data []byte
	i    int // its index in the file's projections
}

// report reports reason about the key sub (fields[2].type) of projection
// name, at its file and line; a projection of no file is an example's.
func (o projectionOrigin) report(r *config.Report, name, sub, reason string) {
	at, ok := o[name]
	if !ok {
		r.Add("indexes.examples", reason)
		return
	}
	key := fmt.Sprintf("projections[%d].%s", at.i, sub)
	r.AddIn(at.file, config.LineOf(at.data, key), key, reason)
}

// checkErr is the form of projections.Set.Check's error.
var checkErr = regexp.MustCompile(`^projection "((?:[^"\\]|\\.)*)": `)

// stageProjections loads the projections as loadProjections does,
// reporting every bad file of indexes.projections; a nil set when they
// cannot all be loaded (then no consumer index is refused for want of a
// projection: it may be in the bad file).
func stageProjections(c *config.Config, r *config.Report, examples exampleSet) (*projections.Set, projectionOrigin) {
	set, origin, ok := projections.NewSet(), projectionOrigin{}, true
	for i, ex := range c.Indexes.Examples {
		key := fmt.Sprintf("indexes.examples[%d]", i)
		register, found := examples[ex]
		switch {
		case r.Reported(key):
			ok = false
		case !found:
			r.Add(key, fmt.Sprintf("%q is not a built-in example", ex))
			ok = false
		default:
			if err := register(set); err != nil {
				r.Add(key, err.Error())
				ok = false
			}
		}
	}
	for i, p := range c.Indexes.Projections {
		key := fmt.Sprintf("indexes.projections[%d]", i)
		if r.Reported(key) {
			ok = false
			continue
		}
		files, err := projectionFiles(c.Path(p))
		if err != nil {
			r.Add(key, err.Error())
			ok = false
			continue
		}
		for _, f := range files {
			if !addProjectionFile(r, set, origin, f) {
				ok = false
			}
		}
	}
	if !ok {
		return nil, origin
	}
	return set, origin
}

// projectionFiles is p, or the *.yaml, *.yml and *.json files of p when it
// is a directory, in name order (as projections.Set.LoadFiles reads them).
func projectionFiles(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil || !st.IsDir() {
		return []string{p}, err
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
			files = append(files, filepath.Join(p, e.Name()))
		}
	}
	slices.Sort(files)
	return files, nil
}

// addProjectionFile adds the projections of file to set, reporting what is
// wrong with it; false when something is.
func addProjectionFile(r *config.Report, set *projections.Set, origin projectionOrigin, file string) bool {
	data, err := os.ReadFile(file)
	if err != nil {
		r.AddIn(file, 0, "", err.Error())
		return false
	}
	ps, err := projections.Parse(file, data)
	if de, ok := errors.AsType[*projections.DeclError](err); ok {
		reason := de.Reason
		if de.Projection != "" {
			reason = fmt.Sprintf("%s (projection %q)", reason, de.Projection)
		}
		r.AddIn(file, de.Line, de.Key, reason)
		return false
	}
	if err != nil {
		line, reason := 0, strings.TrimPrefix(err.Error(), "projections "+file+": ")
		if m := yamlPos.FindStringSubmatch(reason); m != nil {
			line, _ = strconv.Atoi(m[1])
			reason = m[2]
		}
		r.AddIn(file, line, "", reason)
		return false
	}
	for i, p := range ps {
		if err := set.Add(p); err != nil {
			key := fmt.Sprintf("projections[%d]", i)
			r.AddIn(file, config.LineOf(data, key), key, err.Error())
			return false
		}
		origin[p.Name] = projectionAt{file: file, data: data, i: i}
	}
	return true
}
