package projections

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Encode is json.Marshal of a decoded document (maps, slices, json.Number,
// strings, bools, nil), faster.
func Encode(doc map[string]any) ([]byte, error) { return AppendEncode(nil, doc) }

// AppendEncode appends what json.Marshal writes for doc to dst, byte for
// byte (keys sorted, HTML characters, U+2028 and U+2029 escaped, invalid
// UTF-8 as U+FFFD, a json.Number checked; TestEncodeLikeEncodingJSON).
//
// Encoding documents was a tenth of the consumer's CPU (issue #11): this
// walks the shapes Decode makes without reflection and with one allocation
// (the output) when dst is nil; values of other types (a Go projection's
// int or float64) go through sonic's encoder, which writes what
// encoding/json does. On error dst is returned as it was.
func AppendEncode(dst []byte, doc map[string]any) ([]byte, error) {
	if dst == nil {
		dst = make([]byte, 0, 64+32*len(doc))
	}
	out, err := appendValue(dst, doc, 0)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// maxDepth is the nesting below which appendValue hands a value to sonic's
// encoder (which stops a cycle, as encoding/json does, with an error rather
// than running out of stack).
const maxDepth = 1000

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return appendOther(b, v)
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, x), nil
	case bool:
		if x {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case json.Number:
		s := x.String()
		if s == "" {
			s = "0" // as encoding/json writes the empty Number
		}
		if !isValidNumber(s) {
			return b, fmt.Errorf("json: invalid number literal %q", s)
		}
		return append(b, s...), nil
	case map[string]any:
		return appendObject(b, x, depth)
	case []any:
		if x == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, el := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, el, depth+1); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	default:
		return appendOther(b, v)
	}
}

func appendOther(b []byte, v any) ([]byte, error) {
	enc, err := encoder.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, enc...), nil
}

func appendObject(b []byte, m map[string]any, depth int) ([]byte, error) {
	if m == nil {
		return append(b, "null"...), nil
	}
	if len(m) > len(orderBuf{}) {
		return appendOther(b, m) // not a document's shape; sonic sorts as well
	}
	// The entries taken in one pass (no look-up per key), their order
	// sorted by index (moving bytes, not strings and values).
	var buf [32]entry
	var ob orderBuf
	entries, order := buf[:0], ob[:0]
	for k, v := range m {
		order = append(order, uint8(len(entries)))
		entries = append(entries, entry{k, v})
	}
	slices.SortFunc(order, func(x, y uint8) int { return strings.Compare(entries[x].k, entries[y].k) })
	b = append(b, '{')
	for i, o := range order {
		e := &entries[o]
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, e.k)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, e.v, depth+1); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// orderBuf holds the order of an object's entries, up to 32 of them.
type orderBuf [32]uint8

type entry struct {
	k string
	v any
}

const hex = "0123456789abcdef"

// appendString is encoding/json's string encoding with HTML escaping.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				// Other control characters and <, >, &.
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// isValidNumber reports whether s is a JSON number literal (as
// encoding/json checks a json.Number before writing it).
func isValidNumber(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '-' {
		s = s[1:]
		if s == "" {
			return false
		}
	}
	switch {
	case s[0] == '0':
		s = s[1:]
	case '1' <= s[0] && s[0] <= '9':
		s = s[1:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	default:
		return false
	}
	if len(s) >= 2 && s[0] == '.' && '0' <= s[1] && s[1] <= '9' {
		s = s[2:]
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s[0] == '+' || s[0] == '-' {
			s = s[1:]
			if s == "" {
				return false
			}
		}
		for len(s) > 0 && '0' <= s[0] && s[0] <= '9' {
			s = s[1:]
		}
	}
	return s == ""
}
