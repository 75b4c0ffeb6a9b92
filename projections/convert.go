package projections

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// convert checks and converts a field value to its declared type.
func convert(v any, t FieldType) (any, error) {
	if v == nil || t == TypeAny {
		return v, nil
	}
	bad := func() error { return fmt.Errorf("%s %s is not a %s", kind(v), short(v), t) }
	switch t {
	case TypeKeyword, TypeText:
		// v itself when it is already right: boxing x again would allocate.
		switch x := v.(type) {
		case string:
			return v, nil
		case json.Number:
			return x.String(), nil
		case bool:
			return strconv.FormatBool(x), nil
		case []any:
			for _, el := range x {
				if _, ok := el.(string); !ok {
					return nil, bad()
				}
			}
			return v, nil
		}
		return nil, bad()
	case TypeLong:
		var s string
		switch x := v.(type) {
		case json.Number:
			s = x.String()
		case string:
			s = strings.TrimSpace(x)
		default:
			return nil, bad()
		}
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, bad()
		}
		return json.Number(strconv.FormatInt(i, 10)), nil
	case TypeDouble:
		var s string
		switch x := v.(type) {
		case json.Number:
			s = x.String()
		case string:
			s = strings.TrimSpace(x)
		default:
			return nil, bad()
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, bad()
		}
		return json.Number(s), nil
	case TypeBoolean:
		switch x := v.(type) {
		case bool:
			return v, nil
		case string:
			if b, err := strconv.ParseBool(x); err == nil {
				return b, nil
			}
		}
		return nil, bad()
	case TypeDate:
		switch v.(type) {
		case string, json.Number:
			return v, nil
		}
		return nil, bad()
	case TypeObject:
		if _, ok := v.(map[string]any); ok {
			return v, nil
		}
		return nil, bad()
	}
	return v, nil
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 40 {
		return string(b[:37]) + "..."
	}
	return string(b)
}
