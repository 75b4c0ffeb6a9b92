package projections

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/bytedance/sonic"

	"github.com/searchsync/searchsync/outbox"
)

// decoder decodes payloads and documents. Decoding them into maps was the
// largest part of the consumer's CPU (issue #11's profile); bytedance/sonic
// does it about three times as fast as encoding/json (BenchmarkDecode) with
// the same result (TestDecodeLikeEncodingJSON): numbers as json.Number.
// Its strings point into what it decodes, which is Decode's own copy of the
// input: one allocation instead of one per string and number (half of them),
// and nothing points into the caller's buffer (pgx may reuse its buffers).
var decoder = sonic.Config{UseNumber: true}.Froze()

// encoder writes documents as encoding/json does, byte for byte (sorted
// keys, HTML escaped: sonic's ConfigStd).
var encoder = sonic.ConfigStd

// Decode parses a JSON object keeping numbers exact (json.Number), so that
// versions and long fields survive the round trip unchanged.
func Decode(data []byte) (map[string]any, error) {
	var m map[string]any
	if err := decoder.UnmarshalFromString(string(data), &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}

// Lookup returns the value at a dotted path in v ("after.address.city",
// "items.0.sku") and whether it is present.
func Lookup(v any, path string) (any, bool) {
	if path == "" || path == "." {
		return v, true
	}
	// Segment by segment without splitting: a look-up runs several times
	// per event and must not allocate.
	for more := true; more; {
		var seg string
		seg, path, more = strings.Cut(path, ".")
		switch c := v.(type) {
		case map[string]any:
			x, ok := c[seg]
			if !ok {
				return nil, false
			}
			v = x
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// SetPath stores value at a dotted path in m, creating objects on the way (an
// existing non-object on the way is replaced).
func SetPath(m map[string]any, path string, value any) {
	for {
		seg, rest, more := strings.Cut(path, ".")
		if !more {
			m[seg] = value
			return
		}
		next, ok := m[seg].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[seg] = next
		}
		m, path = next, rest
	}
}

// eventValue resolves an @column path of an event.
func eventValue(e *outbox.Event, path string) (any, bool) {
	col, rest, _ := strings.Cut(strings.TrimPrefix(path, "@"), ".")
	var v any
	switch col {
	case "id":
		v = json.Number(strconv.FormatInt(e.ID, 10))
	case "aggregate_id":
		if e.AggregateID == nil {
			return nil, false
		}
		v = e.AggregateID.String()
	case "aggregate_type":
		v = e.AggregateType
	case "event_type":
		v = e.EventType
	case "tenant_id":
		if e.TenantID == nil {
			return nil, false
		}
		v = e.TenantID.String()
	case "correlation_id":
		if e.CorrelationID == nil {
			return nil, false
		}
		v = e.CorrelationID.String()
	case "schema_version":
		v = json.Number(strconv.Itoa(max(e.SchemaVersion, 1)))
	case "created_at":
		if e.CreatedAt.IsZero() {
			return nil, false
		}
		v = formatMicros(e.CreatedAt)
	default:
		return nil, false
	}
	if rest != "" {
		return nil, false
	}
	return v, true
}

// microsLayout is how @created_at reads: UTC, microseconds (PostgreSQL's
// precision).
const microsLayout = "2006-01-02T15:04:05.000000Z07:00"

// formatMicros is t.UTC().Format(microsLayout), about four times as fast
// (Format reads its layout on every call; it was 8 % of the consumer's CPU
// on the realistic benchmark); years outside 0–9999 go through Format.
func formatMicros(t time.Time) string {
	t = t.UTC()
	y, mo, d := t.Date()
	if y < 0 || y > 9999 {
		return t.Format(microsLayout)
	}
	h, mi, sec := t.Clock()
	var b [27]byte
	digits := func(at, v, n int) {
		for k := at + n - 1; k >= at; k-- {
			b[k] = byte('0' + v%10)
			v /= 10
		}
	}
	digits(0, y, 4)
	b[4] = '-'
	digits(5, int(mo), 2)
	b[7] = '-'
	digits(8, d, 2)
	b[10] = 'T'
	digits(11, h, 2)
	b[13] = ':'
	digits(14, mi, 2)
	b[16] = ':'
	digits(17, sec, 2)
	b[19] = '.'
	digits(20, t.Nanosecond()/1000, 6)
	b[26] = 'Z'
	return string(b[:])
}

// resolve looks a path up in the payload or, for "@…", in the event's columns.
func resolve(e *outbox.Event, payload map[string]any, path string) (any, bool) {
	if strings.HasPrefix(path, "@") {
		return eventValue(e, path)
	}
	return Lookup(payload, path)
}

func validPath(p string) error {
	if p == "" {
		return fmt.Errorf("is empty")
	}
	s := strings.TrimPrefix(p, "@")
	if strings.HasPrefix(p, "@") {
		switch s {
		case "id", "aggregate_id", "aggregate_type", "event_type", "tenant_id", "correlation_id", "schema_version", "created_at":
		default:
			return fmt.Errorf("%q names no event column (one of @id, @aggregate_id, @aggregate_type, @event_type, @tenant_id, @correlation_id, @schema_version, @created_at)", p)
		}
		return nil
	}
	for _, seg := range strings.Split(s, ".") {
		if seg == "" {
			return fmt.Errorf("%q has an empty segment", p)
		}
	}
	return nil
}

// DeepMerge merges src onto dst in place and returns dst: objects merge key by
// key, everything else (scalars, arrays, null) replaces. A key that src does
// not mention is kept. dst may be nil.
func DeepMerge(dst, src map[string]any) map[string]any {
	if dst == nil {
		dst = make(map[string]any, len(src))
	}
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = DeepMerge(dm, sm)
				continue
			}
			dst[k] = DeepMerge(nil, sm)
			continue
		}
		dst[k] = deepCopy(sv)
	}
	return dst
}

// Clone returns a deep copy of a document.
func Clone(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return deepCopy(m).(map[string]any)
}

func deepCopy(v any) any {
	switch c := v.(type) {
	case map[string]any:
		// maps.Clone copies the table as it is, much faster than inserting
		// key by key; then only the objects and arrays in it are replaced
		// by copies (documents are mostly flat: often none).
		out := maps.Clone(c)
		for k, x := range out {
			switch x.(type) {
			case map[string]any, []any:
				out[k] = deepCopy(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(c))
		for i, x := range c {
			out[i] = deepCopy(x)
		}
		return out
	default:
		return v
	}
}
