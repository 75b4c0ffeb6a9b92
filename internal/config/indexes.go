package config

import (
	"fmt"
	"os"
	"path/filepath"
)

// Indexes says where the search consumer finds index definitions and
// projections (see packages mapping and projections).
type Indexes struct {
	// Definitions is a directory of index definition files (<alias>.json,
	// .yaml or .yml) that override the embedded defaults of the same alias
	// and add new ones. Relative paths are relative to the configuration
	// file. Default "" (embedded definitions only).
	Definitions string `yaml:"definitions"`
	// Projections are projection files or directories (every *.yaml, *.yml,
	// *.json in it), relative to the configuration file. Default none.
	Projections []string `yaml:"projections"`
	// Examples names built-in example projections (with their upcasters) to
	// load: "customer" (entity.customer.* on DDM_ENTITY into customers) and
	// "contacts" (entity.person.* on DDM_ENTITY into persons, and the
	// relation relation.customer_contact.* on DDM_ENTITY_RELATION between
	// customers and persons; load it beside customer). Default none.
	Examples []string `yaml:"examples"`
	// OnDrift is what start-up does when a live index does not match its
	// definition: warn (log "reindex required", report it in status, keep
	// writing to the live index) or fail (stop start-up). Default warn.
	OnDrift string `yaml:"on_drift"`
}

// Path resolves a path of the configuration relative to the directory of
// the configuration file (unchanged when absolute or when there is no file).
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) || c.file == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.file), p)
}

func (c *Config) validateIndexes(v *validator) {
	ix := &c.Indexes
	if ix.OnDrift == "" {
		ix.OnDrift = "warn"
	}
	switch ix.OnDrift {
	case "warn", "fail":
	default:
		v.add("indexes.on_drift", fmt.Sprintf("%q is not one of warn, fail", ix.OnDrift))
	}
	if ix.Definitions != "" {
		if st, err := os.Stat(c.Path(ix.Definitions)); err != nil || !st.IsDir() {
			v.add("indexes.definitions", fmt.Sprintf("%q is not a directory", c.Path(ix.Definitions)))
		}
	}
	for i, p := range ix.Projections {
		if _, err := os.Stat(c.Path(p)); err != nil {
			v.add(fmt.Sprintf("indexes.projections[%d]", i), fmt.Sprintf("%q: no such file or directory", c.Path(p)))
		}
	}
	for i, e := range ix.Examples {
		if e != "customer" && e != "contacts" {
			v.add(fmt.Sprintf("indexes.examples[%d]", i), fmt.Sprintf("%q is not a built-in example (customer, contacts)", e))
		}
	}
}
