package projections_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/projections"
)

// stdDecode is what Decode did with encoding/json: the reference.
func stdDecode(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	err := dec.Decode(&m)
	return m, err
}

var decodeCases = []string{
	`{"tenant_key":"public","entity_type":"customer","entity_id":"9c2b7f3e-1b2c-4d5e-8f90-123456789abc","code":"C-1001","version":5,
	  "before":{"status":"draft","name":"Old"},"after":{"status":"active","name":"New","credit_limit":"1200","address":{"city":"Berlin","country":"DE"}},
	  "actor":{"principal_type":"user","principal_id":"u1"}}`,
	`{"big":12345678901234567890123,"neg":-0.5e-10,"exp":1E+400,"zero":0,"float":3.14159265358979323846264338327950288}`,
	`{"esc":"line\nbreak \"quoted\" \\ tab\t \u00e9\u4e2d \ud83d\ude00","slash":"a\/b","empty":"","ctl":"\u0000"}`,
	`{"nested":{"a":[1,[2,[3,{"b":null}]],{"c":true,"d":false}]},"arr":[],"obj":{}}`,
	`{"dup":1,"dup":2}`,
	`{"München":"Köln","日本":"東京"}`,
}

// Decode gives what encoding/json with UseNumber gives, for the shapes
// payloads and documents have, and refuses what is not an object.
func TestDecodeLikeEncodingJSON(t *testing.T) {
	for _, c := range decodeCases {
		want, err := stdDecode([]byte(c))
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		got, err := projections.Decode([]byte(c))
		if err != nil {
			t.Errorf("%s: %v", c, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", c, got, want)
		}
	}
	for _, bad := range []string{`null`, `[1,2]`, `"x"`, `{"a":`, `{"a":1}x`, ``, `{"a":01}`} {
		if m, err := projections.Decode([]byte(bad)); err == nil {
			t.Errorf("%q: decoded to %v, want an error", bad, m)
		}
	}
	// The strings do not point into the input: a buffer reused afterwards
	// leaves them unchanged.
	buf := []byte(`{"name":"original"}`)
	m, err := projections.Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, strings.Repeat("x", len(buf)))
	if m["name"] != "original" {
		t.Errorf("decoded string changed with its input buffer: %q", m["name"])
	}
}

// Encode writes what json.Marshal writes, byte for byte.
func TestEncodeLikeEncodingJSON(t *testing.T) {
	for _, c := range decodeCases {
		m, err := projections.Decode([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		m["html"] = "<b>&</b>"
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := projections.Encode(m)
		if err != nil {
			t.Errorf("%s: %v", c, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c, got, want)
		}
	}
}

// BenchmarkDecode compares Decode with the encoding/json decoding it
// replaced, on the spec's payload shape.
func BenchmarkDecode(b *testing.B) {
	p := []byte(decodeCases[0])
	for _, tc := range []struct {
		name string
		f    func([]byte) (map[string]any, error)
	}{{"encoding-json", stdDecode}, {"searchsync", projections.Decode}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.f(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Encode writes what json.Marshal writes for values a Go projection may put
// into a document too, and for strings that need escaping.
func TestEncodeValuesLikeEncodingJSON(t *testing.T) {
	wide := map[string]any{}
	for i := range 40 {
		wide[strings.Repeat("k", i%7)+string(rune('a'+i%26))+strings.Repeat("z", i/26)] = i
	}
	docs := []map[string]any{
		{"ctl": "\x00\x01\b\f\n\r\t\x1f\x7f", "html": "<a href=\"x\">&</a>", "bad": "a\xffb\xc3", "sep": "\u2028x\u2029", "bs": `\`},
		{"int": 3, "float": 1.5, "big": 1e21, "small": 1e-7, "neg": -2.5, "i64": int64(-9007199254740993), "u": uint8(7), "f32": float32(0.1)},
		{"nilmap": map[string]any(nil), "nilslice": []any(nil), "empty": []any{}, "obj": map[string]any{}, "null": nil, "num": json.Number(""),
			"strs": []string{"x", "<"}, "typed": map[string]string{"b": "1", "a": "2"}},
		{"nested": map[string]any{"b": []any{map[string]any{"d": true, "c": false}}, "a": json.Number("-1.5e+3")}},
		wide,
		{"Key": 1, "key": 2, "KEY": 3, "ä": 4, "a": 5, "\u00e4x": 6},
	}
	for _, m := range docs {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := projections.Encode(m)
		if err != nil {
			t.Errorf("%v: %v", m, err)
			continue
		}
		// sonic writes backspace and form feed as \u0008 and \u000c where
		// encoding/json writes \b and \f: the same string.
		got = bytes.ReplaceAll(bytes.ReplaceAll(got, []byte(`\u0008`), []byte(`\b`)), []byte(`\u000c`), []byte(`\f`))
		if !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	}
	for _, n := range []string{"01", "1.", ".5", "1e", "+1", "-", "0x10", "1e+", "NaN"} {
		m := map[string]any{"n": json.Number(n)}
		if _, err := json.Marshal(m); err == nil {
			t.Fatalf("reference accepts %q", n)
		}
		if got, err := projections.Encode(m); err == nil {
			t.Errorf("json.Number %q: encoded %s; want an error", n, got)
		}
	}
	// A Go projection's cycle is an error, as json.Marshal makes it, not a
	// stack overflow.
	cyc := map[string]any{}
	cyc["self"] = []any{cyc}
	if _, err := projections.Encode(cyc); err == nil {
		t.Error("a cyclic document encoded")
	}
	for _, n := range []string{"0", "-0", "10", "1.25", "1e5", "1E-5", "-0.5e+10", "123456789012345678901234567890"} {
		if _, err := projections.Encode(map[string]any{"n": json.Number(n)}); err != nil {
			t.Errorf("json.Number %q: %v", n, err)
		}
	}
}
