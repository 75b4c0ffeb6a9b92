package config

import (
	"fmt"
	"slices"

	"github.com/searchsync/searchsync/backfill"
)

// Backfill declares the backfill sources: SQL over the platform's own
// tables whose rows become snapshot events (docs/backfill.md). Package
// backfill owns the fields' meaning, defaults and checks.
type Backfill struct {
	Sources []backfill.Source `yaml:"sources"`
}

// validateBackfill checks every source and that names are unique.
func (c *Config) validateBackfill(v *validator) {
	seen := map[string]bool{}
	for i := range c.Backfill.Sources {
		s := &c.Backfill.Sources[i]
		key := fmt.Sprintf("backfill.sources[%d]", i)
		for _, p := range s.Check() {
			v.add(key+"."+p.Field, p.Reason)
		}
		if s.Name != "" && seen[s.Name] {
			v.add(key+".name", fmt.Sprintf("%q is declared twice", s.Name))
		}
		seen[s.Name] = true
		*s = s.WithDefaults()
	}
}

// BackfillSource returns the declared source of that name, with its
// defaults, or an error that lists the declared ones.
func (c *Config) BackfillSource(name string) (backfill.Source, error) {
	var names []string
	for _, s := range c.Backfill.Sources {
		if s.Name == name {
			return s.WithDefaults(), nil
		}
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return backfill.Source{}, fmt.Errorf("no backfill source %q: the configuration declares none (backfill.sources, docs/backfill.md)", name)
	}
	slices.Sort(names)
	return backfill.Source{}, fmt.Errorf("no backfill source %q%s; declared: %v", name, DidYouMean(name, names), names)
}
