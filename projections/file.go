package projections

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// File is the YAML (or JSON) form of a projection file.
type File struct {
	Projections []Projection `yaml:"projections" json:"projections"`
	// Upcasters are declared upcasters (see UpcasterDecl).
	Upcasters []UpcasterDecl `yaml:"upcasters" json:"upcasters,omitempty"`
	// Relations are relation aggregates whose events reach the documents
	// of the entities they connect (see Relation).
	Relations []Relation `yaml:"relations" json:"relations,omitempty"`
}

// Parse reads a projection file's bytes and returns its projections (its
// upcasters are checked too: see ParseFile); name is used in errors.
func Parse(name string, data []byte) ([]Projection, error) {
	f, err := ParseFile(name, data)
	if err != nil {
		return nil, err
	}
	return f.Projections, nil
}

// ParseFile reads a projection file's bytes, checks its projections and
// upcasters and compiles their expressions; name is used in errors. Unknown
// keys are errors, reported with their line; an invalid declaration is a
// *DeclError with the file, the line and the key (upcasters[0].steps[2].expr).
func ParseFile(name string, data []byte) (*File, error) {
	var f File
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("projections %s: %s", name, yaml.FormatError(err, false, true))
	}
	var tree *ast.File
	located := func(err error, key string) error {
		var de *DeclError
		if !errors.As(err, &de) {
			return fmt.Errorf("projections %s: %s: %w", name, key, err)
		}
		if tree == nil {
			tree, _ = parser.ParseBytes(data, 0)
		}
		de.File = name
		if key != "" {
			de.Key = key + "." + de.Key
		}
		de.Line = line(tree, de.Key)
		return de
	}
	for i := range f.Projections {
		if err := f.Projections[i].check(); err != nil {
			return nil, located(err, fmt.Sprintf("projections[%d]", i))
		}
	}
	for i := range f.Upcasters {
		if _, err := f.Upcasters[i].compileKeyed(i); err != nil {
			return nil, located(err, "")
		}
	}
	for i := range f.Relations {
		if err := f.Relations[i].check(); err != nil {
			return nil, located(err, fmt.Sprintf("relations[%d]", i))
		}
	}
	return &f, nil
}

// LoadFiles adds the projections of files and directories (every *.yaml,
// *.yml and *.json in a directory, in name order) to the set.
func (s *Set) LoadFiles(paths ...string) error {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("projections: %w", err)
		}
		files := []string{p}
		if st.IsDir() {
			files = nil
			entries, err := os.ReadDir(p)
			if err != nil {
				return fmt.Errorf("projections: %w", err)
			}
			for _, e := range entries {
				ext := strings.ToLower(filepath.Ext(e.Name()))
				if !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
			slices.Sort(files)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("projections: %w", err)
			}
			if err := s.AddFile(f, data); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddFile parses a projection file's bytes and adds its projections and
// upcasters.
func (s *Set) AddFile(name string, data []byte) error {
	f, err := ParseFile(name, data)
	if err != nil {
		return err
	}
	if err := s.Add(f.Projections...); err != nil {
		return fmt.Errorf("projections %s: %w", name, err)
	}
	if err := s.AddUpcasters(f.Upcasters...); err != nil {
		return fmt.Errorf("projections %s: %w", name, err)
	}
	if err := s.AddRelations(f.Relations...); err != nil {
		return fmt.Errorf("projections %s: %w", name, err)
	}
	return nil
}

// line returns the 1-based line of a key path (projections[0].fields[1].type)
// or of its closest present parent, 0 when unknown.
func line(f *ast.File, key string) int {
	if f == nil {
		return 0
	}
	for k := key; k != ""; k = parentKey(k) {
		p, err := yaml.PathString("$." + k)
		if err != nil {
			continue
		}
		if n, err := p.FilterFile(f); err == nil && n != nil && n.GetToken() != nil {
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
