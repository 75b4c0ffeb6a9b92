// Package exprcompare compares the two expression languages searchsync
// considered for computed fields and conditions, CEL (cel.dev/cel-go, the
// one chosen) and expr-lang/expr, on a customer payload decoded as the
// consumer decodes it (maps, numbers as json.Number): each expression
// compiled once and evaluated per event. A module of its own, so that the
// main module depends on the chosen library only (docs/projections.md, "Why
// CEL"):
//
//	cd internal/exprcompare && go test -run '^$' -bench . -count 4
//	cd internal/exprcompare && go test -run Errors -v
package exprcompare

import (
	"encoding/json"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"
	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
)

// created is a loadgen-shaped created event (full state).
const created = `{"tenant_key":"acme","entity_type":"customer","entity_id":"9c2d1c3e-0000-4000-8000-000000000001","code":"C-000042","version":1,
"before":{},"after":{"first_name":"Ada","last_name":"Lovelace","email":"c42@example.org","city":"Berlin","status":"draft","score":731,"phone":"+49 (30) 123-456"},
"actor":{"principal_type":"user","principal_id":"1f3e0000-0000-4000-8000-000000000002"}}`

func decode(s string) map[string]any {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		panic(err)
	}
	return m
}

var names = []string{"full_name", "phone", "label", "cond", "score"}

// exprs are the expressions: name → {CEL, expr}.
var exprs = map[string][2]string{
	"full_name": {`payload.after.first_name + " " + payload.after.last_name`, `payload.after.first_name + " " + payload.after.last_name`},
	"phone": {`payload.after.phone.replace(" ", "").replace("-", "").replace("(", "").replace(")", "")`,
		`replace(replace(replace(replace(payload.after.phone, " ", ""), "-", ""), "(", ""), ")", "")`},
	"label": {`{"draft": "Draft", "active": "Active", "suspended": "Suspended"}[payload.after.status]`,
		`{"draft": "Draft", "active": "Active", "suspended": "Suspended"}[payload.after.status]`},
	"cond":  {`payload.after.status == "archived"`, `payload.after.status == "archived"`},
	"score": {`payload.after.score > 500`, `payload.after.score > 500`},
}

func celEnv(tb testing.TB) *cel.Env {
	env, err := cel.NewEnv(cel.Variable("payload", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)), ext.Strings())
	if err != nil {
		tb.Fatal(err)
	}
	return env
}

// celProgram compiles as searchsync does (constant folding, OptOptimize).
func celProgram(tb testing.TB, env *cel.Env, src string) (cel.Program, error) {
	a, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	f, _ := cel.NewConstantFoldingOptimizer()
	o, _ := cel.NewStaticOptimizer(f)
	if folded, iss := o.Optimize(env, a); iss.Err() == nil {
		a = folded
	}
	return env.Program(a, cel.EvalOptions(cel.OptOptimize))
}

var exprEnv = expr.Env(map[string]any{"payload": map[string]any{}, "event": map[string]any{}})

func BenchmarkCEL(b *testing.B) {
	env := celEnv(b)
	for _, name := range names {
		prg, err := celProgram(b, env, exprs[name][0])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			p := decode(created)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := prg.Eval(map[string]any{"payload": p}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExpr leaves out score: expr cannot compare a json.Number
// (BenchmarkExprConverted converts the payload's numbers first).
func BenchmarkExpr(b *testing.B) {
	for _, name := range names[:4] {
		prg, err := expr.Compile(exprs[name][1], exprEnv)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			p := decode(created)
			var m vm.VM
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Run(prg, map[string]any{"payload": p}); err != nil {
					b.Fatal(name, err)
				}
			}
		})
	}
}

// BenchmarkExprConverted is score with expr on a copy of the payload whose
// numbers are int64 or float64.
func BenchmarkExprConverted(b *testing.B) {
	prg, err := expr.Compile(exprs["score"][1], exprEnv)
	if err != nil {
		b.Fatal(err)
	}
	p := decode(created)
	var m vm.VM
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Run(prg, map[string]any{"payload": numbers(p)}); err != nil {
			b.Fatal(err)
		}
	}
}

// numbers returns a copy of v with json.Number as int64 or float64.
func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = numbers(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = numbers(e)
		}
		return out
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// TestErrors logs both languages' messages, at compile time and at run
// time, side by side (go test -run Errors -v).
func TestErrors(t *testing.T) {
	env := celEnv(t)
	p := decode(created)
	for _, src := range []string{`paylod.after.x`, `1 + "a"`, `payload.after.`, `payload.after.first_name + 1`,
		`payload.after.nope + "x"`, `payload.after.nope == "x"`, `payload.after.score + 1`, `payload.after.first_name.nope`} {
		if prg, err := celProgram(t, env, src); err != nil {
			t.Logf("CEL  %-32s compile: %v", src, err)
		} else {
			out, _, err := prg.Eval(map[string]any{"payload": p})
			t.Logf("CEL  %-32s run: %v, %v", src, out, err)
		}
		if prg, err := expr.Compile(src, exprEnv); err != nil {
			t.Logf("expr %-32s compile: %v", src, err)
		} else {
			out, err := expr.Run(prg, map[string]any{"payload": p})
			t.Logf("expr %-32s run: %v, %v", src, out, err)
		}
	}
}
