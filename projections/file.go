package projections

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
)

// File is the YAML (or JSON) form of a projection file.
type File struct {
	Projections []Projection `yaml:"projections" json:"projections"`
}

// Parse reads a projection file's bytes; name is used in errors. Unknown keys
// are errors, reported with their line.
func Parse(name string, data []byte) ([]Projection, error) {
	var f File
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("projections %s: %s", name, yaml.FormatError(err, false, true))
	}
	for i := range f.Projections {
		if err := f.Projections[i].check(); err != nil {
			return nil, fmt.Errorf("projections %s: projections[%d]: %w", name, i, err)
		}
	}
	return f.Projections, nil
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

// AddFile parses a projection file's bytes and adds its projections.
func (s *Set) AddFile(name string, data []byte) error {
	ps, err := Parse(name, data)
	if err != nil {
		return err
	}
	if err := s.Add(ps...); err != nil {
		return fmt.Errorf("projections %s: %w", name, err)
	}
	return nil
}
