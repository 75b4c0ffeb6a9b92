// Package mapping owns the index definitions: settings and mappings per
// alias as files (embedded defaults in defs/, overridable by a directory),
// the physical versioned index behind each alias, the definition hash kept in
// the index's _meta, creation at start-up and drift detection.
//
// # Names
//
// Applications read and write through the alias (customers). The physical
// index is <alias>_v<N> (customers_v1, customers_v2, …): N grows by one with
// every reindex, so names stay readable and ordered, and an old generation is
// never reused. Its mappings carry
//
//	"_meta": {"searchsync": {"alias": "customers", "hash": "<sha256 of the definition>"}}
//
// The hash covers the canonical JSON (sorted keys) of the settings, the
// mappings as created (with the tombstone field added in soft-delete mode)
// and the delete mode. Ensure creates a missing index and alias; a definition
// whose hash differs from the live index's is drift: Ensure reports it
// ("reindex required: run searchsync reindex customers") and changes nothing.
//
// # Projections
//
// A definition given the fingerprint of the projections that write its
// index (Def.Writers, Defs.SetWriters: projections.Set.Fingerprint) keeps it
// beside the hash, as projections_hash and a summary per projection
// (projections). A live index built by other projections is drift too,
// described by projections.Fingerprint.Changes ("projection customer
// changed: fields added full_name"). Go code cannot be hashed: a changed Go
// function or upcaster needs `searchsync reindex --force`.
//
// An index created before searchsync kept the fingerprint (a hash, no
// projections_hash) is not drift: Ensure records the current fingerprint in
// its _meta (Status.Adopted; the search consumer logs it at INFO), taking
// the projections at hand as those that built it. From then on a change of
// them is drift. See docs/reindex.md, "Projection drift".
//
// # Deletes: soft by default
//
// delete_mode "soft" (the default) writes a delete as a versioned tombstone
// document (the last state plus "deleted": true) and the alias carries a
// filter that hides tombstones from searches and counts. "hard" sends a
// versioned delete. Soft is the default because the engine keeps the
// version of a hard-deleted document only for index.gc_deletes (60 s by
// default) and forgets it on restart: a stale write (a retry, a replay, a
// reindex overlapping live writes) arriving later is then accepted and
// resurrects the document. A tombstone keeps its version for as long as the
// document exists, so every older write is rejected with a 409. The cost is
// that tombstones stay in the index until a reindex drops them (the
// reindexer skips tombstones).
//
// # Multi-tenancy
//
// tenancy.mode "shared" (the default) keeps every tenant in one index; the
// tenant key is written to tenancy.field (default tenant_key) of every
// document, and searches filter on it. "per_tenant" gives each tenant its own
// alias <alias>_<tenant> (customers_acme → customers_acme_v1), created on the
// first event of the tenant; tenant keys are lower-cased and must match
// [a-z0-9][a-z0-9_-]* (an event with another tenant key is poison).
package mapping

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/searchsync/searchsync/projections"
)

//go:embed defs
var embedded embed.FS

// DeleteMode says how a delete reaches the index.
type DeleteMode string

// The delete modes.
const (
	DeleteSoft DeleteMode = "soft" // versioned tombstone document, hidden by the alias filter
	DeleteHard DeleteMode = "hard" // versioned delete
)

// TenancyMode says how tenants share indexes.
type TenancyMode string

// The tenancy modes.
const (
	TenancyShared    TenancyMode = "shared"     // one index, tenant key in a field
	TenancyPerTenant TenancyMode = "per_tenant" // one alias and index per tenant
)

// Tenancy configures multi-tenancy of one index.
type Tenancy struct {
	// Mode is shared or per_tenant. Default shared.
	Mode TenancyMode `json:"mode" yaml:"mode"`
	// Field holds the tenant key in every document. Default "tenant_key".
	Field string `json:"field" yaml:"field"`
}

// Def is one index definition.
type Def struct {
	// Alias is the name applications use. Default: the file name without
	// extension.
	Alias string `json:"alias" yaml:"alias"`
	// DeleteMode is soft or hard. Default soft (see the package doc).
	DeleteMode DeleteMode `json:"delete_mode" yaml:"delete_mode"`
	// TombstoneField marks soft-deleted documents. Default "deleted".
	TombstoneField string `json:"tombstone_field" yaml:"tombstone_field"`
	// VersionPath is the default JSON path of the external version in
	// payloads for projections into this index. Default "version".
	VersionPath string `json:"version_path" yaml:"version_path"`
	// Tenancy configures multi-tenancy.
	Tenancy Tenancy `json:"tenancy" yaml:"tenancy"`
	// Settings and Mappings are the index body, as for the create-index API.
	Settings map[string]any `json:"settings" yaml:"settings"`
	Mappings map[string]any `json:"mappings" yaml:"mappings"`

	// Source is where the definition came from (embedded:defs/x.json or a path).
	Source string `json:"-" yaml:"-"`
	// Writers is the fingerprint of the projections that write the index
	// (Defs.SetWriters), kept in _meta beside the hash and compared by
	// Check; nil leaves the projections out of both.
	Writers *projections.Fingerprint `json:"-" yaml:"-"`
}

var (
	aliasRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,200}$`)
	tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,50}$`)
	// a tenant key ending like a generation would let one tenant's alias
	// collide with another tenant's physical index.
	generationRE = regexp.MustCompile(`_v[0-9]+$`)
)

func (d *Def) setDefaults(source string) {
	d.Source = source
	if d.Alias == "" {
		base := filepath.Base(source)
		d.Alias = strings.TrimSuffix(base, filepath.Ext(base))
	}
	if d.DeleteMode == "" {
		d.DeleteMode = DeleteSoft
	}
	if d.TombstoneField == "" {
		d.TombstoneField = "deleted"
	}
	if d.VersionPath == "" {
		d.VersionPath = "version"
	}
	if d.Tenancy.Mode == "" {
		d.Tenancy.Mode = TenancyShared
	}
	if d.Tenancy.Field == "" {
		d.Tenancy.Field = "tenant_key"
	}
	if d.Settings == nil {
		d.Settings = map[string]any{}
	}
	if d.Mappings == nil {
		d.Mappings = map[string]any{}
	}
}

func (d *Def) check() error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("index definition %s: %s: %s", d.Source, key, fmt.Sprintf(format, args...))
	}
	if !aliasRE.MatchString(d.Alias) {
		return bad("alias", "%q is not a valid index name (lower case letters, digits, _ and -)", d.Alias)
	}
	switch d.DeleteMode {
	case DeleteSoft, DeleteHard:
	default:
		return bad("delete_mode", "%q is not one of soft, hard", d.DeleteMode)
	}
	switch d.Tenancy.Mode {
	case TenancyShared, TenancyPerTenant:
	default:
		return bad("tenancy.mode", "%q is not one of shared, per_tenant", d.Tenancy.Mode)
	}
	if _, ok := d.Mappings["_meta"]; ok {
		return bad("mappings._meta", "is set by searchsync; remove it")
	}
	return nil
}

// Parse reads one definition (JSON or YAML); source names it in errors and
// gives the default alias.
func Parse(source string, data []byte) (*Def, error) {
	var d Def
	var err error
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		dec.DisallowUnknownFields()
		err = dec.Decode(&d)
	} else {
		err = yaml.UnmarshalWithOptions(data, &d, yaml.Strict(), yaml.DisallowUnknownField(), yaml.UseJSONUnmarshaler())
	}
	if err != nil {
		return nil, fmt.Errorf("index definition %s: %w", source, err)
	}
	d.setDefaults(source)
	if err := d.check(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Defs is a set of definitions by alias.
type Defs map[string]*Def

// Names returns the aliases in order.
func (ds Defs) Names() []string {
	var out []string
	for k := range ds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Load returns the embedded definitions overridden (by alias) and extended
// by the *.json, *.yaml and *.yml files of dir ("" for embedded only).
func Load(dir string) (Defs, error) {
	defs := Defs{}
	err := fs.WalkDir(embedded, "defs", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := embedded.ReadFile(p)
		if err != nil {
			return err
		}
		d, err := Parse("embedded:"+p, data)
		if err != nil {
			return err
		}
		defs[d.Alias] = d
		return nil
	})
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return defs, nil
	}
	files, err := DefinitionFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("index definitions: %w", err)
	}
	seen := map[string]string{}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("index definitions: %w", err)
		}
		d, err := Parse(p, data)
		if err != nil {
			return nil, err
		}
		if prev, ok := seen[d.Alias]; ok {
			return nil, fmt.Errorf("index definition %s: alias %q is also defined by %s", p, d.Alias, prev)
		}
		seen[d.Alias] = p
		defs[d.Alias] = d
	}
	return defs, nil
}

// DefinitionFiles lists the index definition files of dir (.json, .yaml,
// .yml, not in subdirectories), by name: what Load reads.
func DefinitionFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if !e.IsDir() && (ext == ".json" || ext == ".yaml" || ext == ".yml") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// mappingsAsCreated returns the mappings with the tombstone field added in
// soft-delete mode (without _meta).
func (d *Def) mappingsAsCreated() map[string]any {
	m := cloneMap(d.Mappings)
	if d.DeleteMode == DeleteSoft {
		props, _ := m["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
			m["properties"] = props
		}
		if _, ok := props[d.TombstoneField]; !ok {
			props[d.TombstoneField] = map[string]any{"type": "boolean"}
		}
	}
	if d.Tenancy.Mode == TenancyShared {
		props, _ := m["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
			m["properties"] = props
		}
		if _, ok := props[d.Tenancy.Field]; !ok {
			props[d.Tenancy.Field] = map[string]any{"type": "keyword"}
		}
	}
	return m
}

// Hash is the sha256 (hex) of the canonical definition: settings, mappings
// as created and the delete mode. json.Marshal sorts map keys, which makes
// the encoding canonical.
func (d *Def) Hash() string {
	b, err := json.Marshal(map[string]any{
		"settings":        d.Settings,
		"mappings":        d.mappingsAsCreated(),
		"delete_mode":     d.DeleteMode,
		"tombstone_field": d.TombstoneField,
	})
	if err != nil {
		panic(fmt.Sprintf("mapping: definition %s does not encode: %v", d.Alias, err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SearchFilter is the alias filter: in soft-delete mode it hides tombstones,
// otherwise nil.
//
// In an index that relations reach (Linked), it also hides the documents
// whose entity does not exist (projections.LiveKey false: deleted, or only
// named by relations so far).
func (d *Def) SearchFilter() json.RawMessage {
	var not []any
	if d.DeleteMode == DeleteSoft {
		not = append(not, map[string]any{"term": map[string]any{d.TombstoneField: true}})
	}
	if d.Linked() {
		not = append(not, map[string]any{"term": map[string]any{projections.LiveKey: false}})
	}
	if len(not) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"bool": map[string]any{"must_not": not}})
	return b
}

// Linked reports whether relations reach the index's documents
// (projections.Set.Linked, through Writers): they carry
// projections.MetaKey, mapped unindexed, and projections.LiveKey.
func (d *Def) Linked() bool { return d.Writers != nil && d.Writers.Linked }

// Body is the create-index body of the physical index (settings, mappings
// with _meta, no aliases).
func (d *Def) Body() json.RawMessage {
	m := d.mappingsAsCreated()
	if d.Linked() {
		props, _ := m["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
			m["properties"] = props
		}
		props[projections.MetaKey] = map[string]any{"type": "object", "enabled": false}
		props[projections.LiveKey] = map[string]any{"type": "boolean"}
	}
	m["_meta"] = map[string]any{"searchsync": d.meta()}
	b, err := json.Marshal(map[string]any{"settings": d.Settings, "mappings": m})
	if err != nil {
		panic(fmt.Sprintf("mapping: definition %s does not encode: %v", d.Alias, err))
	}
	return b
}

// meta is _meta.searchsync of the physical index: the alias, the
// definition hash and, with Writers, the projections fingerprint.
func (d *Def) meta() map[string]any {
	m := map[string]any{"alias": d.Alias, "hash": d.Hash()}
	if d.Writers != nil {
		m["projections_hash"] = d.Writers.Hash
		m["projections"] = d.Writers.Projections
	}
	return m
}

// SetWriters gives every definition the fingerprint of the projections of
// set that write its index (projections.Set.Fingerprint), so that Ensure,
// Check and a reindex record and compare it.
func (ds Defs) SetWriters(set *projections.Set) {
	for name, d := range ds {
		d.Writers = set.Fingerprint(name)
	}
}

// ForTenant returns the definition of one tenant's alias in per_tenant
// mode (<alias>_<tenant>); in shared mode it returns d itself.
func (d *Def) ForTenant(tenant string) (*Def, error) {
	if d.Tenancy.Mode != TenancyPerTenant {
		return d, nil
	}
	alias, err := d.TenantAlias(tenant)
	if err != nil {
		return nil, err
	}
	c := *d
	c.Alias = alias
	return &c, nil
}

// TenantAlias is the alias of a tenant in per_tenant mode: <alias>_<tenant>.
func (d *Def) TenantAlias(tenant string) (string, error) {
	t := strings.ToLower(tenant)
	if !tenantRE.MatchString(t) || generationRE.MatchString(t) {
		return "", fmt.Errorf("tenant key %q cannot name an index (per_tenant mode of %s needs [a-z0-9][a-z0-9_-]*, at most 51 characters, not ending in _v<digits>)", tenant, d.Alias)
	}
	return d.Alias + "_" + t, nil
}

func cloneMap(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	_ = dec.Decode(&out)
	if out == nil {
		out = map[string]any{}
	}
	return out
}

// FieldType returns the mapped type of a dotted document path ("address.city")
// as the definition declares it: "object" for a field with properties and no
// type, "" when the definition does not map it.
func (d *Def) FieldType(path string) string {
	props, _ := d.mappingsAsCreated()["properties"].(map[string]any)
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		f, ok := props[seg].(map[string]any)
		if !ok {
			return ""
		}
		if i == len(segs)-1 {
			if t, ok := f["type"].(string); ok {
				return t
			}
			if _, ok := f["properties"]; ok {
				return "object"
			}
			return ""
		}
		props, _ = f["properties"].(map[string]any)
	}
	return ""
}

// compatible lists the mapping types a projection field type may land in.
var compatible = map[string][]string{
	"keyword": {"keyword", "constant_keyword", "wildcard", "text", "match_only_text"},
	"text":    {"text", "match_only_text", "keyword", "wildcard", "search_as_you_type"},
	"long":    {"long", "integer", "short", "byte", "unsigned_long", "double", "float", "half_float", "scaled_float", "keyword"},
	"double":  {"double", "float", "half_float", "scaled_float"},
	"boolean": {"boolean", "keyword"},
	"date":    {"date", "date_nanos"},
	"object":  {"object", "nested", "flattened", "flat_object"},
}

// CheckFieldType reports an error when a projection field of type want
// lands on a path that the definition maps with an incompatible type.
func (d *Def) CheckFieldType(path, want string) error {
	got := d.FieldType(path)
	if got == "" || want == "" {
		return nil
	}
	if slices.Contains(compatible[want], got) {
		return nil
	}
	return fmt.Errorf("field %s is declared %s but index %s maps it as %s (%s)", path, want, d.Alias, got, d.Source)
}
