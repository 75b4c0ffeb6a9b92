package projections

import (
	"encoding/json"
	"fmt"
	"strings"
)

// run applies the step to each object it names (the payload without In).
func (c *compiledStep) run(a *activation) error {
	if len(c.in) == 0 {
		return c.runOn(a, a.payload, "")
	}
	for _, base := range c.in {
		_, _, v, ok, err := lookupStep(a.payload, base, "")
		if err != nil {
			return err
		}
		if !ok || v == nil {
			continue // no such object in this payload: nothing to change
		}
		obj, isObj := v.(map[string]any)
		if !isObj {
			return notObject(base, v)
		}
		if err := c.runOn(a, obj, base); err != nil {
			return err
		}
	}
	return nil
}

// runOn applies the step to obj, whose path in the payload is base ("" for
// the payload).
func (c *compiledStep) runOn(a *activation, obj map[string]any, base string) error {
	a.self = obj
	if c.when != nil {
		ok, err := c.when.cond(a)
		if err != nil || !ok {
			return err
		}
	}
	if c.action == "set" {
		v, absent, err := c.expr.eval(a)
		if err != nil || absent {
			return err
		}
		return setStep(obj, c.path, base, deepCopy(v), true)
	}
	parent, key, v, ok, err := lookupStep(obj, c.path, base)
	if err != nil {
		return err
	}
	if !ok {
		if c.action == "default" {
			return setStep(obj, c.path, base, deepCopy(c.value), false)
		}
		if c.req {
			return fmt.Errorf("%s is missing (the step is required)", join(base, c.path))
		}
		return nil
	}
	switch c.action {
	case "rename":
		if err := setStep(obj, c.to, base, v, false); err != nil {
			return err
		}
		delete(parent, key)
	case "copy":
		return setStep(obj, c.to, base, deepCopy(v), false)
	case "drop":
		delete(parent, key)
	case "convert":
		cv, err := convert(v, c.typ)
		if err != nil {
			return fmt.Errorf("%s: %w", join(base, c.path), err)
		}
		parent[key] = cv
	}
	return nil
}

// lookupStep finds p in obj through objects: the object holding it, its
// last segment, its value and whether it is present. A value on the way
// that is neither an object nor null is an error naming its path.
func lookupStep(obj map[string]any, p, base string) (parent map[string]any, key string, v any, ok bool, err error) {
	m, rest := obj, p
	for {
		seg, tail, more := strings.Cut(rest, ".")
		x, present := m[seg]
		if !more {
			return m, seg, x, present, nil
		}
		if !present || x == nil {
			return nil, "", nil, false, nil
		}
		next, isObj := x.(map[string]any)
		if !isObj {
			return nil, "", nil, false, notObject(join(base, p[:len(p)-len(tail)-1]), x)
		}
		m, rest = next, tail
	}
}

// setStep stores v at p in obj, creating objects on the way (a null on the
// way becomes an object); overwrite false makes a present value an error.
func setStep(obj map[string]any, p, base string, v any, overwrite bool) error {
	m, rest := obj, p
	for {
		seg, tail, more := strings.Cut(rest, ".")
		x, present := m[seg]
		if !more {
			if present && !overwrite {
				return fmt.Errorf("%s is already present (%s): the step would overwrite it", join(base, p), short(x))
			}
			m[seg] = v
			return nil
		}
		switch next := x.(type) {
		case map[string]any:
			m = next
		case nil:
			n := map[string]any{}
			m[seg], m = n, n
		default:
			return notObject(join(base, p[:len(p)-len(tail)-1]), x)
		}
		rest = tail
	}
}

// jsonValue turns a value decoded from YAML into a payload value (numbers
// as json.Number).
func jsonValue(v any) (any, error) {
	b, err := json.Marshal(map[string]any{"v": v})
	if err != nil {
		return nil, fmt.Errorf("is not a JSON value: %w", err)
	}
	m, err := Decode(b)
	if err != nil {
		return nil, err
	}
	return m["v"], nil
}

// join is the payload path of p in the object at base.
func join(base, p string) string {
	if base == "" {
		return p
	}
	return base + "." + p
}
