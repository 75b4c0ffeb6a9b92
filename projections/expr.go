package projections

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/searchsync/searchsync/outbox"
)

// Expressions are CEL (cel.dev/cel-go): no I/O, no loops but the bounded
// macros, a cost that grows with the payload only. They see
//
//	payload  the payload (after upcasting, for a projection)
//	event    the event's columns: id, event_type, aggregate_type,
//	         aggregate_id, tenant_id, correlation_id, schema_version,
//	         created_at (a column that is null is absent)
//	self     in an upcaster step, the object the step applies to (the
//	         payload, or each object its `in` names)
//
// Payload numbers (json.Number) read as int or double. docs/projections.md
// has the reasons for CEL over expr-lang/expr and the figures.

// exprEnvs are the CEL environments: for projections (payload, event) and
// for upcaster steps (payload, event, self). Built once.
var exprEnvs = sync.OnceValues(func() ([2]*cel.Env, error) {
	base := []cel.EnvOption{
		cel.Variable("payload", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		ext.Strings(), ext.Encoders(), ext.Math(), ext.Lists(), ext.Sets(),
		cel.OptionalTypes(),
	}
	proj, err := cel.NewEnv(base...)
	if err != nil {
		return [2]*cel.Env{}, err
	}
	step, err := proj.Extend(cel.Variable("self", cel.DynType))
	return [2]*cel.Env{proj, step}, err
})

// exprFolder folds the constant parts of an expression.
var exprFolder = func() *cel.StaticOptimizer {
	f, err := cel.NewConstantFoldingOptimizer()
	if err != nil {
		panic(err)
	}
	o, err := cel.NewStaticOptimizer(f)
	if err != nil {
		panic(err)
	}
	return o
}()

// activations are reused by run: an evaluation allocates no activation.
var activations = sync.Pool{New: func() any { return new(activation) }}

// program is one compiled expression.
type program struct {
	src string
	prg cel.Program
	ast *celast.AST
	// has is set for a condition that is only has(payload.a.b): the object
	// holding it (payload.a) and its key, tested without CEL.
	has *struct{ parent, key string }
}

// compileExpr compiles src for a projection (step false) or an upcaster
// step (step true). Its errors are CEL's, with line, column and a caret.
func compileExpr(src string, step bool) (*program, error) {
	envs, err := exprEnvs()
	if err != nil {
		return nil, err
	}
	env := envs[0]
	if step {
		env = envs[1]
	}
	a, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, errors.New(strings.ReplaceAll(strings.TrimPrefix(iss.Err().Error(), "ERROR: "), "<input>:", "at "))
	}
	// Constant parts (a map literal of labels) are computed once, here.
	if folded, iss := exprFolder.Optimize(env, a); iss.Err() == nil {
		a = folded
	}
	prg, err := env.Program(a, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, err
	}
	p := &program{src: src, prg: prg, ast: a.NativeRep()}
	if x := p.ast.Expr(); x.Kind() == celast.SelectKind && x.AsSelect().IsTestOnly() {
		if parent := selectPath(x.AsSelect().Operand()); strings.HasPrefix(parent, "payload") && !strings.Contains(parent, "(") {
			p.has = &struct{ parent, key string }{strings.TrimPrefix(strings.TrimPrefix(parent, "payload"), "."), x.AsSelect().FieldName()}
		}
	}
	return p, nil
}

// activation is what an expression sees; event's columns are put together
// only when an expression reads them.
type activation struct {
	e       *outbox.Event
	payload map[string]any
	self    any
	cols    map[string]any
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "payload":
		return a.payload, true
	case "self":
		return a.self, a.self != nil
	case "event":
		if a.cols == nil {
			a.cols = eventColumns(a.e)
		}
		return a.cols, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

func eventColumns(e *outbox.Event) map[string]any {
	m := make(map[string]any, 8)
	if e == nil {
		return m
	}
	for _, c := range []string{"id", "aggregate_id", "aggregate_type", "event_type", "tenant_id", "correlation_id", "schema_version", "created_at"} {
		if v, ok := eventValue(e, "@"+c); ok {
			m[c] = v
		}
	}
	return m
}

// run evaluates p on a pooled copy of a: a itself stays on its caller's
// stack, and an evaluation allocates no activation; the event's columns,
// once put together, are kept in a.
func (p *program) run(a *activation) (ref.Val, error) {
	h := activations.Get().(*activation)
	*h = *a
	out, _, err := p.prg.Eval(h)
	a.cols = h.cols
	*h = activation{}
	activations.Put(h)
	return out, err
}

// eval runs p and returns its value as a payload value (string, bool,
// json.Number, nil, []any, map[string]any); absent is an optional.none().
func (p *program) eval(a *activation) (v any, absent bool, err error) {
	out, err := p.run(a)
	if err != nil {
		return nil, false, p.explain(err)
	}
	if o, ok := out.(*types.Optional); ok {
		if !o.HasValue() {
			return nil, true, nil
		}
		out = o.GetValue()
	}
	v, err = native(out)
	if err != nil {
		return nil, false, fmt.Errorf("expression %q: %w", p.src, err)
	}
	return v, false, nil
}

// cond runs a condition: it must give a boolean.
func (p *program) cond(a *activation) (bool, error) {
	if p.has != nil {
		// has(payload.a.b) where payload.a is an object: its key, without
		// CEL (a third of a computed field's cost); anything else (payload.a
		// absent: an error) goes through CEL.
		if parent, ok := Lookup(a.payload, p.has.parent); ok {
			if m, ok := parent.(map[string]any); ok {
				_, ok = m[p.has.key]
				return ok, nil
			}
		}
	}
	out, err := p.run(a)
	if err != nil {
		return false, p.explain(err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("condition %q is %s, not a boolean", p.src, out.Type().TypeName())
	}
	return bool(b), nil
}

// explain adds to a run-time error the expression, the path or function it
// failed on and where, so that a poison reason says what to fix.
func (p *program) explain(err error) error {
	var ce *types.Err
	if !errors.As(err, &ce) || ce.NodeID() == 0 {
		return fmt.Errorf("expression %q: %w", p.src, err)
	}
	id := ce.NodeID()
	col := p.ast.SourceInfo().GetStartLocation(id).Column() + 1
	var at celast.Expr
	celast.PostOrderVisit(p.ast.Expr(), celast.NewExprVisitor(func(x celast.Expr) {
		if x.ID() == id {
			at = x
		}
	}))
	msg := err.Error()
	if at != nil {
		switch at.Kind() {
		case celast.SelectKind:
			path := selectPath(at)
			msg = fmt.Sprintf("%s at %s", msg, path)
			if strings.HasPrefix(msg, "no such key") {
				msg += fmt.Sprintf(" (test it with has(%s), or read it with %s)", path, optionalPath(path))
			}
		case celast.CallKind:
			msg = fmt.Sprintf("%s for %s", msg, strings.Trim(at.AsCall().FunctionName(), "_"))
		}
	}
	return fmt.Errorf("expression %q: %s (column %d)", p.src, msg, col)
}

// selectPath is the dotted path of a field selection (payload.after.name).
func selectPath(x celast.Expr) string {
	switch x.Kind() {
	case celast.SelectKind:
		return selectPath(x.AsSelect().Operand()) + "." + x.AsSelect().FieldName()
	case celast.IdentKind:
		return x.AsIdent()
	}
	return "(…)"
}

// optionalPath is path with its last selection optional, or'ed with "".
func optionalPath(path string) string {
	i := strings.LastIndex(path, ".")
	if i < 0 {
		return path
	}
	return path[:i] + ".?" + path[i+1:] + `.orValue("")`
}

// native turns a CEL value into a payload value.
func native(v ref.Val) (any, error) {
	switch x := v.(type) {
	case types.String:
		return string(x), nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return json.Number(strconv.FormatInt(int64(x), 10)), nil
	case types.Uint:
		return json.Number(strconv.FormatUint(uint64(x), 10)), nil
	case types.Double:
		f := float64(x)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("gives %v, which JSON cannot hold", f)
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	case types.Null:
		return nil, nil
	case types.Timestamp:
		return x.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return x.Duration.String(), nil
	}
	switch x := v.Value().(type) {
	case map[string]any, []any, string, json.Number, bool:
		// A part of the payload, as it is: copied where it is stored.
		return x, nil
	}
	if l, ok := v.(traits.Lister); ok {
		out := []any{}
		for it := l.Iterator(); it.HasNext() == types.True; {
			el, err := native(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, el)
		}
		return out, nil
	}
	if m, ok := v.(traits.Mapper); ok {
		out := map[string]any{}
		for it := m.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("gives a map with the key %v, not a string", k)
			}
			el, err := native(m.Get(k))
			if err != nil {
				return nil, err
			}
			out[string(ks)] = el
		}
		return out, nil
	}
	return nil, fmt.Errorf("gives a %s, which a document cannot hold", v.Type().TypeName())
}
