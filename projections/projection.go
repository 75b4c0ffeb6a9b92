package projections

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/routing"
)

// Op is what a projection asks the search consumer to do with a document.
type Op string

// The operations.
const (
	OpIndex  Op = "index"  // write the document (whole, or merged when Partial)
	OpDelete Op = "delete" // delete it (hard or soft, per the index definition)
	OpIgnore Op = "ignore" // nothing to do; the event counts as delivered
)

// Result is the outcome of projecting one event.
type Result struct {
	// Projection is the name of the projection that produced it.
	Projection string
	Op         Op
	// Index is the alias (index definition name) the document belongs to,
	// before any per-tenant naming.
	Index string
	// Tenant is the tenant key of the event ("" when it has none).
	Tenant string
	// ID is the document id.
	ID string
	// Version is the external version of the write.
	Version int64
	// Doc is the document for OpIndex; when Partial, only the fields the
	// event mentioned, to be merged onto the current document.
	Doc map[string]any
	// Partial says that Doc must be merged onto the current state.
	Partial bool
	// Snapshot says that the event is a snapshot (routing.IsSnapshot):
	// Doc is the whole state at Version, written by a backfill.
	Snapshot bool
	// EventID is the outbox id of the event.
	EventID int64
	// Link, when set, says that the result comes from a relation's event
	// (Relation) and what it does to the document; nil for a result of the
	// document's own entity.
	Link *Link
}

// Input is what a Go projection function sees: the event and its payload,
// already upcast to the newest schema_version.
type Input struct {
	Event   *outbox.Event
	Payload map[string]any
}

// Func is a projection written in Go. It receives out pre-filled from the
// declaration (op, id, version, tenant, the declared fields) and may change
// any of it. An error it returns is poison; wrap *PoisonError or return any
// error (it is wrapped). It is called concurrently for different events and
// must not keep state between calls.
type Func func(in *Input, out *Result) error

// Upcaster turns a payload of schema_version N into N+1, in place.
type Upcaster func(payload map[string]any) error

// FieldType is the declared type of a projected field.
type FieldType string

// The field types.
const (
	TypeAny     FieldType = ""
	TypeKeyword FieldType = "keyword"
	TypeText    FieldType = "text"
	TypeLong    FieldType = "long"
	TypeDouble  FieldType = "double"
	TypeBoolean FieldType = "boolean"
	TypeDate    FieldType = "date"
	TypeObject  FieldType = "object"
)

// Field copies one value from the payload (or an @column) into the
// document, or computes it (Expr).
type Field struct {
	// From is a dotted path into the payload or an @column. Exactly one of
	// From and Expr.
	From string `yaml:"from" json:"from"`
	// Expr computes the value (a CEL expression on payload and event).
	Expr string `yaml:"expr" json:"expr,omitempty"`
	// When is a condition: where false, the event does not mention the
	// field (the current value stays).
	When string `yaml:"when" json:"when,omitempty"`
	// To is the dotted path in the document. Default: the last segment of
	// From; required with Expr.
	To string `yaml:"to" json:"to"`
	// Type converts and checks the value: keyword, text, long, double,
	// boolean, date, object. Default: none (the value as it is).
	Type FieldType `yaml:"type" json:"type"`
	// Keyword, on a text field, is a hint that the index maps a .keyword
	// sub-field for sorting and aggregations (used by Properties).
	Keyword bool `yaml:"keyword" json:"keyword"`

	expr, when *program
}

// Projection is one declared projection.
type Projection struct {
	// Name identifies the projection in errors. Required, unique.
	Name string `yaml:"name" json:"name"`
	// EventTypes are path.Match patterns on event_type. Required.
	EventTypes []string `yaml:"event_types" json:"event_types"`
	// AggregateTypes are patterns on aggregate_type. Default: any.
	AggregateTypes []string `yaml:"aggregate_types" json:"aggregate_types"`
	// Index is the alias the documents go to. Required.
	Index string `yaml:"index" json:"index"`
	// ID is the path of the document id. Default "@aggregate_id".
	ID string `yaml:"id" json:"id"`
	// Version is the path of the external version. Default: the index
	// definition's version_path, else "version".
	Version string `yaml:"version" json:"version"`
	// Tenant is the path of the tenant key. Default "tenant_key"; "-" for none.
	Tenant string `yaml:"tenant" json:"tenant"`
	// SchemaVersion is the newest payload shape this projection reads.
	// Default 1.
	SchemaVersion int `yaml:"schema_version" json:"schema_version"`
	// DeleteOn are event_type patterns that delete. Default ["*.deleted"].
	DeleteOn []string `yaml:"delete_on" json:"delete_on"`
	// IgnoreOn are event_type patterns that change nothing. Default none.
	IgnoreOn []string `yaml:"ignore_on" json:"ignore_on"`
	// DeleteWhen and IgnoreWhen are conditions on the payload and the
	// event (CEL) that delete or ignore what the patterns would index.
	DeleteWhen string `yaml:"delete_when" json:"delete_when,omitempty"`
	IgnoreWhen string `yaml:"ignore_when" json:"ignore_when,omitempty"`
	// FullStateOn are event_type patterns whose `after` is the whole state.
	// Default ["*.created", "*.snapshot"].
	FullStateOn []string `yaml:"full_state_on" json:"full_state_on"`
	// After is the path of the new state (or the changed fields). Default "after".
	After string `yaml:"after" json:"after"`
	// CopyAllOfAfter copies every field of After into the document.
	CopyAllOfAfter bool `yaml:"copy_all_of_after" json:"copy_all_of_after"`
	// Fields are copied after CopyAllOfAfter, so they win.
	Fields []Field `yaml:"fields" json:"fields"`
	// Go names a registered Func that runs after the declared fields.
	Go string `yaml:"go" json:"go"`

	fn                     Func
	deleteWhen, ignoreWhen *program
	// kinds caches the op and full-state decision per event type.
	kinds *sync.Map // event type → eventKind; set by Set.Add
}

// eventKind is what the patterns say about one event type.
type eventKind struct {
	op   Op
	full bool
}

func (p *Projection) kind(eventType string) eventKind {
	if p.kinds != nil {
		if k, ok := p.kinds.Load(eventType); ok {
			return k.(eventKind)
		}
	}
	k := eventKind{op: OpIndex, full: matchAny(p.FullStateOn, eventType)}
	switch {
	case matchAny(p.IgnoreOn, eventType):
		k.op = OpIgnore
	case matchAny(p.DeleteOn, eventType):
		k.op = OpDelete
	}
	if p.kinds != nil {
		p.kinds.Store(eventType, k)
	}
	return k
}

func (p *Projection) setDefaults() {
	p.kinds = &sync.Map{}
	p.ID = orDefault(p.ID, "@aggregate_id")
	p.Tenant = orDefault(p.Tenant, "tenant_key")
	p.SchemaVersion = max(p.SchemaVersion, 1)
	if p.DeleteOn == nil {
		p.DeleteOn = []string{"*.deleted"}
	}
	if p.FullStateOn == nil {
		p.FullStateOn = []string{"*.created", "*.snapshot"}
	}
	p.After = orDefault(p.After, "after")
	for i := range p.Fields {
		if p.Fields[i].To == "" && p.Fields[i].From != "" {
			p.Fields[i].To = p.Fields[i].From[strings.LastIndex(p.Fields[i].From, ".")+1:]
		}
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Matches reports whether the projection handles an event of this type and aggregate.
func (p *Projection) Matches(eventType, aggregateType string) bool {
	return matchAny(p.EventTypes, eventType) && (len(p.AggregateTypes) == 0 || matchAny(p.AggregateTypes, aggregateType))
}

func matchAny(patterns []string, s string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, s); ok {
			return true
		}
	}
	return false
}

type upcaster struct {
	pattern string
	from    int
	fn      Upcaster      // registered in Go
	decl    *declUpcaster // declared in a file
}

// Set holds the projections, Go functions and upcasters of one process. It is
// safe for concurrent use once built; register everything before the first
// Project.
type Set struct {
	mu          sync.RWMutex
	projections []*Projection
	relations   []*Relation
	funcs       map[string]Func
	upcasters   []upcaster
	// found caches Find per (indexes, event type, aggregate type); newest
	// caches the newest schema_version per event type. Both are reset by
	// Add and RegisterUpcaster.
	found       sync.Map
	newestCache sync.Map
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{funcs: map[string]Func{}} }

// RegisterFunc makes a Go projection function available to `go: name`.
func (s *Set) RegisterFunc(name string, fn Func) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.funcs[name] = fn
	for _, p := range s.projections {
		if p.Go == name {
			p.fn = fn
		}
	}
}

// RegisterUpcaster registers fn to turn payloads of event types matching
// pattern from schema_version from into from+1.
func (s *Set) RegisterUpcaster(pattern string, from int, fn Upcaster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.upcasters = append(s.upcasters, upcaster{pattern: pattern, from: from, fn: fn})
	s.newestCache.Clear()
}

// Add adds projections (declared in Go or loaded from a file); they are
// checked and defaulted. A projection with `go:` needs its function
// registered before the first event is projected.
func (s *Set) Add(ps ...Projection) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ps {
		p := ps[i]
		if err := p.check(); err != nil {
			return err
		}
		if s.declared(p.Name) {
			return fmt.Errorf("projection %q: declared twice", p.Name)
		}
		p.setDefaults()
		if p.Go != "" {
			p.fn = s.funcs[p.Go]
		}
		s.projections = append(s.projections, &p)
	}
	s.found.Clear()
	return nil
}

// Projections returns the declared projections (read only).
func (s *Set) Projections() []*Projection {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.projections)
}

// Indexes returns the aliases the projections and relations write to.
func (s *Set) Indexes() []string {
	var out []string
	for _, p := range s.Projections() {
		if !slices.Contains(out, p.Index) {
			out = append(out, p.Index)
		}
	}
	for _, r := range s.Relations() {
		for _, ix := range []string{r.Source.Index, r.Target.Index} {
			if !slices.Contains(out, ix) {
				out = append(out, ix)
			}
		}
	}
	return out
}

// Check reports projections whose `go:` function is not registered.
func (s *Set) Check() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, p := range s.projections {
		if p.Go != "" && p.fn == nil {
			return fmt.Errorf("projection %q: go function %q is not registered", p.Name, p.Go)
		}
	}
	return nil
}

func (p *Projection) check() error {
	bad := func(key, format string, args ...any) error {
		return &DeclError{Projection: p.Name, Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	if p.Name == "" {
		return &DeclError{Key: "name", Reason: "is required"}
	}
	if len(p.EventTypes) == 0 {
		return bad("event_types", "names at least one pattern")
	}
	for _, list := range [][]string{p.EventTypes, p.AggregateTypes, p.DeleteOn, p.IgnoreOn, p.FullStateOn} {
		for _, pat := range list {
			if _, err := path.Match(pat, ""); err != nil {
				return bad("pattern", "%q: %v", pat, err)
			}
		}
	}
	if p.Index == "" {
		return bad("index", "is required")
	}
	for key, v := range map[string]string{"id": p.ID, "version": p.Version, "after": p.After} {
		if v != "" {
			if err := validPath(v); err != nil {
				return bad(key, "%v", err)
			}
		}
	}
	if p.Tenant != "" && p.Tenant != "-" {
		if err := validPath(p.Tenant); err != nil {
			return bad("tenant", "%v", err)
		}
	}
	if p.SchemaVersion < 0 {
		return bad("schema_version", "must be at least 1")
	}
	for i, f := range p.Fields {
		key := fmt.Sprintf("fields[%d]", i)
		if err := validPath(f.From); err != nil && f.Expr == "" {
			return bad(key+".from", "%v", err)
		}
		if f.To != "" {
			if err := validPath(f.To); err != nil || strings.HasPrefix(f.To, "@") {
				return bad(key+".to", "%q is not a dotted document path", f.To)
			}
		}
		if err := checkType(f.Type); err != nil {
			return bad(key+".type", "%v", err)
		}
	}
	return p.compileExprs()
}

// Find returns the first projection for an event type and aggregate type
// whose index is one of indexes (all when indexes is empty), or nil.
func (s *Set) Find(eventType, aggregateType string, indexes []string) *Projection {
	// A struct, not one concatenated string: the look-up runs per event and
	// allocates nothing (Join of one index is that index).
	key := findKey{strings.Join(indexes, ","), eventType, aggregateType}
	if p, ok := s.found.Load(key); ok {
		return p.(*Projection)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var found *Projection
	for _, p := range s.projections {
		if len(indexes) > 0 && !slices.Contains(indexes, p.Index) {
			continue
		}
		if p.Matches(eventType, aggregateType) {
			found = p
			break
		}
	}
	s.found.Store(key, found)
	return found
}

// findKey is the key of Set.found.
type findKey struct{ indexes, eventType, aggregateType string }

// Upcast decodes the payload of e and brings it to schema_version target by
// applying the registered upcasters in turn. A schema_version newer than
// target, a missing step, or a schema_version below 1 is a *PoisonError.
//
// e is a row as read from the outbox: its SchemaVersion is the column's value
// (the Go writer stores 1 for a zero SchemaVersion, the column defaults to 1),
// so 0 or less was written by plain SQL and is not a version any upcaster
// could start from.
func (s *Set) Upcast(e *outbox.Event, target int) (map[string]any, error) {
	if e.SchemaVersion < 1 {
		return nil, poison(e, "", schemaVersionPath, "schema_version %d is below 1 (the spec's minimum); fix the producer", e.SchemaVersion)
	}
	payload, err := Decode(e.Payload)
	if err != nil {
		return nil, poison(e, "", "payload", "payload is not a JSON object: %v", err)
	}
	v := e.SchemaVersion
	newest := max(target, s.newest(e.EventType))
	if v > newest {
		return nil, poison(e, "", schemaVersionPath, "schema_version %d is newer than any upcaster or projection knows (newest for %s is %d): register an upcaster to %d or upgrade searchsync", v, e.EventType, newest, v)
	}
	for ; v < newest; v++ {
		u, ok := s.upcaster(e.EventType, v)
		switch {
		case !ok:
			return nil, poison(e, "", schemaVersionPath, "no upcaster for %s from schema_version %d to %d", e.EventType, v, v+1)
		case u.decl != nil:
			if err := u.decl.run(e, payload); err != nil {
				return nil, poison(e, "", upcasterPath(err), "upcaster %s (%s %d→%d): %v", u.decl.name, e.EventType, v, v+1, err)
			}
		default:
			if err := u.fn(payload); err != nil {
				return nil, poison(e, "", upcasterPath(err), "upcaster %s %d→%d: %v", e.EventType, v, v+1, err)
			}
		}
	}
	return payload, nil
}

func (s *Set) newest(eventType string) int {
	if n, ok := s.newestCache.Load(eventType); ok {
		return n.(int)
	}
	n := s.newestUncached(eventType)
	s.newestCache.Store(eventType, n)
	return n
}

func (s *Set) newestUncached(eventType string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 1
	for _, u := range s.upcasters {
		if ok, _ := path.Match(u.pattern, eventType); ok {
			n = max(n, u.from+1)
		}
	}
	return n
}

func (s *Set) upcaster(eventType string, from int) (upcaster, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, u := range s.upcasters {
		if ok, _ := path.Match(u.pattern, eventType); ok && u.from == from {
			return u, true
		}
	}
	return upcaster{}, false
}

// Project upcasts and projects one event with the first matching projection
// whose index is one of indexes (all when empty). versionPath is the default
// version path of the index ("" means "version"). An event no projection
// matches gives (nil, nil).
func (s *Set) Project(e *outbox.Event, indexes []string, versionPath func(index string) string) (*Result, error) {
	p := s.Find(e.EventType, e.AggregateType, indexes)
	if p == nil {
		return nil, nil
	}
	payload, err := s.Upcast(e, p.SchemaVersion)
	if err != nil {
		return nil, err
	}
	vp := p.Version
	if vp == "" && versionPath != nil {
		vp = versionPath(p.Index)
	}
	return p.project(e, payload, orDefault(vp, "version"))
}

func (p *Projection) project(e *outbox.Event, payload map[string]any, versionPath string) (*Result, error) {
	k := p.kind(e.EventType)
	op, err := p.op(e, payload, k)
	if err != nil {
		return nil, err
	}
	out := &Result{Projection: p.Name, Op: op, Index: p.Index, Snapshot: routing.IsSnapshot(e.EventType), EventID: e.ID}

	id, ok := resolve(e, payload, p.ID)
	if !ok || id == nil {
		return nil, poison(e, p.Name, p.ID, "no document id at %s", p.ID)
	}
	switch v := id.(type) {
	case string:
		out.ID = v
	case json.Number:
		out.ID = v.String()
	default:
		return nil, poison(e, p.Name, p.ID, "document id at %s is %s, not a string or number", p.ID, kind(id))
	}
	if out.ID == "" || len(out.ID) > 512 {
		return nil, poison(e, p.Name, p.ID, "document id at %s is empty or longer than 512 bytes", p.ID)
	}

	if out.Op != OpIgnore {
		ver, err := version(e, payload, versionPath)
		if err != nil {
			return nil, poison(e, p.Name, versionPath, "%v", err)
		}
		out.Version = ver
	}

	if p.Tenant != "-" {
		if t, ok := resolve(e, payload, p.Tenant); ok && t != nil {
			switch v := t.(type) {
			case string:
				out.Tenant = v
			case json.Number:
				out.Tenant = v.String()
			default:
				return nil, poison(e, p.Name, p.Tenant, "tenant at %s is %s, not a string", p.Tenant, kind(t))
			}
		}
	}

	if out.Op == OpIndex {
		out.Partial = !k.full
		doc, err := p.document(e, payload)
		if err != nil {
			return nil, err
		}
		out.Doc = doc
	}

	if p.Go != "" {
		if p.fn == nil {
			return nil, poison(e, p.Name, "", "go function %q is not registered", p.Go)
		}
		if err := p.fn(&Input{Event: e, Payload: payload}, out); err != nil {
			if pe, ok := errors.AsType[*PoisonError](err); ok {
				return nil, pe
			}
			return nil, poison(e, p.Name, "", "go function %s: %v", p.Go, err)
		}
		if out.Op == OpIndex && out.Doc == nil {
			out.Doc = map[string]any{}
		}
	}
	return out, nil
}

// document builds the document of an index op: a copy of After
// (CopyAllOfAfter), then the declared fields.
//
// The payload was decoded for this event alone, so without a Go function,
// which sees the payload after the document is built, the document takes
// After's map itself instead of a deep copy of it (a third of the
// projection's allocations). Nothing else can tell: every field is read
// from the payload before the first is set, and a field whose value is an
// object or array gets a copy of it, so that no part of the document is
// also another part of it or of the payload.
func (p *Projection) document(e *outbox.Event, payload map[string]any) (map[string]any, error) {
	var after map[string]any
	if p.CopyAllOfAfter {
		if a, ok := Lookup(payload, p.After); ok && a != nil {
			am, ok := a.(map[string]any)
			if !ok {
				return nil, poison(e, p.Name, p.After, "%s is %s, not an object", p.After, kind(a))
			}
			after = am
		}
	}
	if p.Go != "" {
		// The Go function sees the payload as decoded (and upcast).
		doc := Clone(after)
		if doc == nil {
			doc = map[string]any{}
		}
		for i := range p.Fields {
			cv, ok, err := p.fieldValue(e, payload, &p.Fields[i])
			if err != nil {
				return nil, err
			}
			if ok { // else not mentioned: the current value stays
				SetPath(doc, p.Fields[i].To, cv)
			}
		}
		return doc, nil
	}
	var buf [16]any
	values := buf[:0] // per field; missing marks one not mentioned
	for i := range p.Fields {
		cv, ok, err := p.fieldValue(e, payload, &p.Fields[i])
		if err != nil {
			return nil, err
		}
		if !ok {
			values = append(values, missing{}) // the current value stays
			continue
		}
		switch cv.(type) {
		case map[string]any, []any:
			cv = deepCopy(cv)
		}
		values = append(values, cv)
	}
	doc := after
	if doc == nil {
		doc = make(map[string]any, len(p.Fields))
	}
	for i, f := range p.Fields {
		if _, ok := values[i].(missing); !ok {
			SetPath(doc, f.To, values[i])
		}
	}
	return doc, nil
}

// missing marks a field that the event does not mention.
type missing struct{}

// version reads the external version: an integer >= 0.
func version(e *outbox.Event, payload map[string]any, path string) (int64, error) {
	v, ok := resolve(e, payload, path)
	if !ok || v == nil {
		return 0, fmt.Errorf("payload has no version at %q (an integer >= 0 is required for external versioning)", path)
	}
	n, isNum := v.(json.Number)
	if !isNum {
		return 0, fmt.Errorf("version at %q is %s %s, not an integer", path, kind(v), short(v))
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("version at %q is %s, not an integer", path, n)
	}
	if i < 0 {
		return 0, fmt.Errorf("version at %q is %d, negative", path, i)
	}
	return i, nil
}

// Properties returns mapping properties for the typed fields that the
// projections into index declare (a text field with Keyword gets a .keyword
// sub-field): a starting point for writing an index definition. searchsync
// never applies it by itself; definitions are files (package mapping).
func (s *Set) Properties(index string) map[string]any {
	props := map[string]any{}
	for _, p := range s.Projections() {
		if p.Index != index {
			continue
		}
		for _, f := range p.Fields {
			if f.Type == TypeAny {
				continue
			}
			m := props
			segs := strings.Split(f.To, ".")
			for _, seg := range segs[:len(segs)-1] {
				obj, _ := m[seg].(map[string]any)
				if obj == nil {
					obj = map[string]any{"properties": map[string]any{}}
					m[seg] = obj
				}
				inner, _ := obj["properties"].(map[string]any)
				if inner == nil {
					inner = map[string]any{}
					obj["properties"] = inner
				}
				m = inner
			}
			field := map[string]any{"type": string(f.Type)}
			if f.Type == TypeText && f.Keyword {
				field["fields"] = map[string]any{"keyword": map[string]any{"type": "keyword", "ignore_above": 256}}
			}
			m[segs[len(segs)-1]] = field
		}
	}
	return props
}
