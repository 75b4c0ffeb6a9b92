package projections

import (
	"fmt"
	"strings"

	"github.com/searchsync/searchsync/outbox"
)

// compileCond compiles a condition: an expression that gives a boolean
// (or a value only known at run time, checked then).
func compileCond(src string, step bool) (*program, error) {
	p, err := compileExpr(src, step)
	if err != nil {
		return nil, err
	}
	switch t := p.ast.GetType(p.ast.Expr().ID()); t.TypeName() {
	case "bool", "dyn":
	default:
		return nil, fmt.Errorf("condition %q is %s %s, not a bool", src, article(t.TypeName()), t.TypeName())
	}
	return p, nil
}

func checkType(t FieldType) error {
	switch t {
	case TypeAny, TypeKeyword, TypeText, TypeLong, TypeDouble, TypeBoolean, TypeDate, TypeObject:
		return nil
	}
	return fmt.Errorf("%q is not one of keyword, text, long, double, boolean, date, object", t)
}

// compileExprs compiles the projection's expressions: computed fields,
// their conditions, delete_when and ignore_when.
func (p *Projection) compileExprs() error {
	bad := func(key string, err error) error {
		return &DeclError{Projection: p.Name, Key: key, Reason: err.Error()}
	}
	var err error
	p.deleteWhen, p.ignoreWhen = nil, nil
	if p.DeleteWhen != "" {
		if p.deleteWhen, err = compileCond(p.DeleteWhen, false); err != nil {
			return bad("delete_when", err)
		}
	}
	if p.IgnoreWhen != "" {
		if p.ignoreWhen, err = compileCond(p.IgnoreWhen, false); err != nil {
			return bad("ignore_when", err)
		}
	}
	for i := range p.Fields {
		f := &p.Fields[i]
		key := fmt.Sprintf("fields[%d]", i)
		switch {
		case (f.From == "") == (f.Expr == ""):
			return bad(key, fmt.Errorf("names exactly one of from and expr"))
		case f.Expr != "" && f.To == "":
			return bad(key+".to", fmt.Errorf("is required for a computed field (expr)"))
		}
		f.expr, f.when = nil, nil
		if f.Expr != "" {
			if f.expr, err = compileExpr(f.Expr, false); err != nil {
				return bad(key+".expr", err)
			}
		}
		if f.When != "" {
			if f.when, err = compileCond(f.When, false); err != nil {
				return bad(key+".when", err)
			}
		}
	}
	return nil
}

// op is the operation for an event: the event-type patterns, then the
// conditions (ignore before delete, as for the patterns).
func (p *Projection) op(e *outbox.Event, payload map[string]any, k eventKind) (Op, error) {
	if k.op == OpIgnore || (p.ignoreWhen == nil && p.deleteWhen == nil) {
		return k.op, nil
	}
	a := activation{e: e, payload: payload}
	if p.ignoreWhen != nil {
		ok, err := p.ignoreWhen.cond(&a)
		if err != nil {
			return "", poison(e, p.Name, "", "ignore_when: %v", err)
		}
		if ok {
			return OpIgnore, nil
		}
	}
	if k.op == OpIndex && p.deleteWhen != nil {
		ok, err := p.deleteWhen.cond(&a)
		if err != nil {
			return "", poison(e, p.Name, "", "delete_when: %v", err)
		}
		if ok {
			return OpDelete, nil
		}
	}
	return k.op, nil
}

// fieldValue is the value of a field for an event: copied from its path or
// computed; ok false when the event does not mention it (the current value
// stays).
func (p *Projection) fieldValue(e *outbox.Event, payload map[string]any, f *Field) (any, bool, error) {
	if f.expr == nil {
		v, ok := resolve(e, payload, f.From)
		if !ok {
			return nil, false, nil
		}
		cv, err := convert(v, f.Type)
		if err != nil {
			return nil, false, poison(e, p.Name, f.From, "field %s (from %s): %v", f.To, f.From, err)
		}
		return cv, true, nil
	}
	a := activation{e: e, payload: payload}
	if f.when != nil {
		ok, err := f.when.cond(&a)
		if err != nil {
			return nil, false, poison(e, p.Name, "", "field %s (when): %v", f.To, err)
		}
		if !ok {
			return nil, false, nil
		}
	}
	v, absent, err := f.expr.eval(&a)
	if err != nil {
		return nil, false, poison(e, p.Name, "", "field %s (expr): %v", f.To, err)
	}
	if absent {
		return nil, false, nil
	}
	cv, err := convert(v, f.Type)
	if err != nil {
		return nil, false, poison(e, p.Name, "", "field %s (expr %q): %v", f.To, f.Expr, err)
	}
	return cv, true, nil
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}
