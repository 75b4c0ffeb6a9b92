package projections

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/searchsync/searchsync/outbox"
)

// UpcasterDecl is an upcaster declared in a projection file (`upcasters:`):
// the payloads of the event types matching EventTypes at schema_version From
// become From+1 by Steps, in order. Compiled when the file is added.
type UpcasterDecl struct {
	// Name identifies it in errors. Default "EVENT_TYPES FROM→FROM+1".
	Name string `yaml:"name" json:"name,omitempty"`
	// EventTypes are path.Match patterns on event_type. Required.
	EventTypes []string `yaml:"event_types" json:"event_types"`
	// From is the schema_version it reads (≥ 1); it writes From+1.
	From int `yaml:"from" json:"from"`
	// Steps run in order on the payload. At least one.
	Steps []UpcastStep `yaml:"steps" json:"steps"`
}

// UpcastStep is one step of a declared upcaster: exactly one of Rename,
// Copy, Default, Drop, Convert and Set names the path it works on.
//
// Paths are dotted paths through objects, relative to the payload or, with
// In, to each of the objects In names (["before", "after"]: the common case
// of a field renamed in both). An object In names that the payload lacks (or
// holds null) is skipped; one that is not an object is poison.
//
// A path that is absent is left alone (payloads of partial events mention
// only what changed) unless Required; a value on the way that is not an
// object, a value Convert cannot convert, a target that Rename or Copy would
// overwrite and an expression that fails are poison.
type UpcastStep struct {
	Rename  string    `yaml:"rename" json:"rename,omitempty"`   // move the value to To
	Copy    string    `yaml:"copy" json:"copy,omitempty"`       // copy the value to To
	Default string    `yaml:"default" json:"default,omitempty"` // set Value when absent
	Drop    string    `yaml:"drop" json:"drop,omitempty"`       // delete
	Convert string    `yaml:"convert" json:"convert,omitempty"` // convert to Type (a field type)
	Set     string    `yaml:"set" json:"set,omitempty"`         // set to Expr's value
	To      string    `yaml:"to" json:"to,omitempty"`
	Value   any       `yaml:"value" json:"value,omitempty"`
	Type    FieldType `yaml:"type" json:"type,omitempty"`
	Expr    string    `yaml:"expr" json:"expr,omitempty"`
	// In names the objects the paths are relative to. Default: the payload.
	In []string `yaml:"in" json:"in,omitempty"`
	// When is a condition: the step runs only where it is true.
	When string `yaml:"when" json:"when,omitempty"`
	// Required makes an absent path poison.
	Required bool `yaml:"required" json:"required,omitempty"`
}

// op returns the step's action and path; "" when it has none or several.
func (st *UpcastStep) op() (action, p string, n int) {
	for _, c := range [...]struct{ a, p string }{{"rename", st.Rename}, {"copy", st.Copy}, {"default", st.Default}, {"drop", st.Drop}, {"convert", st.Convert}, {"set", st.Set}} {
		if c.p != "" {
			action, p, n = c.a, c.p, n+1
		}
	}
	return action, p, n
}

// compiledStep is an UpcastStep ready to run.
type compiledStep struct {
	key    string // steps[N] (action path)
	action string
	path   string
	to     string
	value  any
	typ    FieldType
	in     []string
	expr   *program
	when   *program
	req    bool
}

// compile checks d and compiles its steps; errors are *DeclError with the
// key of the step (steps[1].expr) relative to the upcaster.
func (d *UpcasterDecl) compile() ([]compiledStep, error) {
	bad := func(key, format string, args ...any) error {
		return &DeclError{Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	if len(d.EventTypes) == 0 {
		return nil, bad("event_types", "names at least one pattern")
	}
	for _, pat := range d.EventTypes {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, bad("event_types", "%q: %v", pat, err)
		}
	}
	if d.From < 1 {
		return nil, bad("from", "must be at least 1 (the schema_version the upcaster reads)")
	}
	if len(d.Steps) == 0 {
		return nil, bad("steps", "names at least one step")
	}
	out := make([]compiledStep, len(d.Steps))
	for i := range d.Steps {
		c, err := d.Steps[i].compile()
		if err != nil {
			if de, ok := errors.AsType[*DeclError](err); ok {
				de.Key = fmt.Sprintf("steps[%d]%s", i, de.Key)
			}
			return nil, err
		}
		c.key = fmt.Sprintf("steps[%d] (%s %s)", i, c.action, c.path)
		out[i] = c
	}
	return out, nil
}

// compileKeyed is compile with the key of a DeclError made absolute
// (upcasters[i].steps[1].expr) and the upcaster's name in its reason.
func (d *UpcasterDecl) compileKeyed(i int) ([]compiledStep, error) {
	steps, err := d.compile()
	if de, ok := errors.AsType[*DeclError](err); ok {
		de.Key = strings.TrimSuffix(fmt.Sprintf("upcasters[%d].%s", i, de.Key), ".")
		if d.Name != "" {
			de.Reason = fmt.Sprintf("(upcaster %s) %s", d.Name, de.Reason)
		}
	}
	return steps, err
}

func (st *UpcastStep) compile() (compiledStep, error) {
	bad := func(key, format string, args ...any) (compiledStep, error) {
		return compiledStep{}, &DeclError{Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	action, p, n := st.op()
	if n != 1 {
		return bad("", "names %d actions; a step is exactly one of rename, copy, default, drop, convert, set", n)
	}
	c := compiledStep{action: action, path: p, to: st.To, typ: st.Type, in: st.In, req: st.Required}
	if err := stepPath(p); err != nil {
		return bad("."+action, "%v", err)
	}
	needs := map[string]bool{"to": action == "rename" || action == "copy", "value": action == "default",
		"type": action == "convert", "expr": action == "set"}
	for key, has := range map[string]bool{"to": st.To != "", "value": st.Value != nil, "type": st.Type != "", "expr": st.Expr != ""} {
		switch {
		case needs[key] && !has:
			return bad("."+action, "%s needs %s", action, key)
		case !needs[key] && has:
			return bad("."+key, "%s takes no %s", action, key)
		}
	}
	if c.to != "" {
		if err := stepPath(c.to); err != nil {
			return bad(".to", "%v", err)
		}
		if c.to == p || strings.HasPrefix(c.to, p+".") || strings.HasPrefix(p, c.to+".") {
			return bad(".to", "%q and %q overlap", p, c.to)
		}
	}
	if st.Required && (action == "default" || action == "set") {
		return bad(".required", "%s takes no required (it writes the path, present or not)", action)
	}
	for j, obj := range st.In {
		if err := stepPath(obj); err != nil {
			return bad(fmt.Sprintf(".in[%d]", j), "%v", err)
		}
	}
	if action == "convert" {
		if err := checkType(st.Type); err != nil {
			return bad(".type", "%v", err)
		}
	}
	if st.Value != nil {
		v, err := jsonValue(st.Value)
		if err != nil {
			return bad(".value", "%v", err)
		}
		c.value = v
	}
	var err error
	if st.Expr != "" {
		if c.expr, err = compileExpr(st.Expr, true); err != nil {
			return bad(".expr", "%v", err)
		}
	}
	if st.When != "" {
		if c.when, err = compileCond(st.When, true); err != nil {
			return bad(".when", "%v", err)
		}
	}
	return c, nil
}

func stepPath(p string) error {
	if strings.HasPrefix(p, "@") {
		return fmt.Errorf("%q: an upcaster changes the payload, not the event's columns", p)
	}
	return validPath(p)
}

// declUpcaster is a compiled UpcasterDecl.
type declUpcaster struct {
	name  string
	steps []compiledStep
	decl  UpcasterDecl
}

// DeclaredUpcasters returns the declared upcasters (AddUpcasters, AddFile),
// in the order they were added, as declared (read only): what the file
// says, for a fingerprint of the projections or a listing.
func (s *Set) DeclaredUpcasters() []UpcasterDecl {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []UpcasterDecl
	var last *declUpcaster
	for _, u := range s.upcasters {
		if u.decl != nil && u.decl != last {
			out = append(out, u.decl.decl)
			last = u.decl
		}
	}
	return out
}

// AddUpcasters compiles declared upcasters and registers them, for each of
// their patterns, as RegisterUpcaster does. Two upcasters for the same
// pattern and From are an error.
func (s *Set) AddUpcasters(ds ...UpcasterDecl) error {
	for i := range ds {
		d := &ds[i]
		steps, err := d.compileKeyed(i)
		if err != nil {
			return err
		}
		u := &declUpcaster{name: d.Name, steps: steps, decl: *d}
		if u.name == "" {
			u.name = fmt.Sprintf("%s %d→%d", strings.Join(d.EventTypes, ","), d.From, d.From+1)
		}
		s.mu.Lock()
		for _, pat := range d.EventTypes {
			for _, o := range s.upcasters {
				if o.pattern == pat && o.from == d.From {
					s.mu.Unlock()
					return fmt.Errorf("upcaster %s: %s from schema_version %d is declared twice", u.name, pat, d.From)
				}
			}
		}
		for _, pat := range d.EventTypes {
			s.upcasters = append(s.upcasters, upcaster{pattern: pat, from: d.From, decl: u})
		}
		s.newestCache.Clear()
		s.mu.Unlock()
	}
	return nil
}

// run applies the steps to payload in place.
func (u *declUpcaster) run(e *outbox.Event, payload map[string]any) error {
	a := activation{e: e, payload: payload}
	for i := range u.steps {
		if err := u.steps[i].run(&a); err != nil {
			return fmt.Errorf("%s: %w", u.steps[i].key, err)
		}
	}
	return nil
}
