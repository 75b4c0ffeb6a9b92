// Package secret owns secret values read from the configuration: where they
// come from (a literal, "env:NAME" or "file:PATH") and keeping them out of
// logs, errors, JSON and printed values. A Value prints as [redacted] through
// every fmt verb, slog and encoding/json; only Reveal gives the text, and it
// is called where the secret goes on the wire.
package secret

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Redacted is what a secret prints as.
const Redacted = "[redacted]"

// Ref is a configuration value that names or holds a secret: "env:NAME"
// (the environment variable NAME), "file:PATH" (the file's contents, one
// trailing newline trimmed) or anything else (the secret itself, literally).
// A Ref prints redacted like a Value, since a literal Ref is the secret.
type Ref string

// Source says where the secret comes from without saying what it is:
// "env:NAME", "file:PATH", "literal" or "" when r is empty.
func (r Ref) Source() string {
	s := string(r)
	switch {
	case s == "":
		return ""
	case strings.HasPrefix(s, "env:"), strings.HasPrefix(s, "file:"):
		return s
	default:
		return "literal"
	}
}

// Resolve reads the secret. key is the configuration key (engine.password)
// and is named in errors; the value never is. An empty Ref resolves to the
// zero Value. An environment variable that is unset or empty, or a file that
// cannot be read or is empty, is an error.
func (r Ref) Resolve(key string) (Value, error) {
	s := string(r)
	if name, ok := strings.CutPrefix(s, "env:"); ok {
		if name == "" {
			return Value{}, &Error{Key: key, Reason: `"env:" names no environment variable`}
		}
		v, set := os.LookupEnv(name)
		switch {
		case !set:
			return Value{}, &Error{Key: key, Reason: fmt.Sprintf("environment variable %s is not set", name)}
		case v == "":
			return Value{}, &Error{Key: key, Reason: fmt.Sprintf("environment variable %s is empty", name)}
		}
		return Value{v}, nil
	}
	if p, ok := strings.CutPrefix(s, "file:"); ok {
		if p == "" {
			return Value{}, &Error{Key: key, Reason: `"file:" names no file`}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			// The *PathError names the path and the cause, never contents.
			return Value{}, &Error{Key: key, Reason: "cannot read secret file", Err: err}
		}
		v := string(b)
		v = strings.TrimSuffix(v, "\n")
		v = strings.TrimSuffix(v, "\r")
		if v == "" {
			return Value{}, &Error{Key: key, Reason: fmt.Sprintf("secret file %s is empty", p)}
		}
		return Value{v}, nil
	}
	return Value{s}, nil
}

// CheckSource checks that r names where the secret is (an "env:" with a
// variable's name, a "file:" with a path) without reading it: for a
// configuration whose secret the command at hand does not use.
func (r Ref) CheckSource(key string) error {
	switch s := string(r); s {
	case "env:":
		return &Error{Key: key, Reason: `"env:" names no environment variable`}
	case "file:":
		return &Error{Key: key, Reason: `"file:" names no file`}
	}
	return nil
}

// Check resolves r and drops the value: for validation.
func (r Ref) Check(key string) error {
	_, err := r.Resolve(key)
	return err
}

// Format prints Redacted (or nothing for an empty Ref) for every verb.
func (r Ref) Format(f fmt.State, _ rune) { writeRedacted(f, r == "") }

// String is Redacted.
func (r Ref) String() string { return redacted(r == "") }

// GoString is Redacted.
func (r Ref) GoString() string { return redacted(r == "") }

// LogValue keeps the secret out of slog.
func (r Ref) LogValue() slog.Value { return slog.StringValue(redacted(r == "")) }

// MarshalJSON keeps the secret out of encoding/json.
func (r Ref) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted(r == "") + `"`), nil }

// MarshalText keeps the secret out of text encoders that use
// encoding.TextMarshaler. (encoding/json writes a map key of a string type
// as it is: never key a map by a Ref.)
func (r Ref) MarshalText() ([]byte, error) { return []byte(redacted(r == "")), nil }

// Value is a resolved secret. The zero Value is "no secret".
type Value struct{ s string }

// New wraps a secret that did not come from the configuration.
func New(s string) Value { return Value{s} }

// Reveal is the secret itself: call it only where the secret goes on the
// wire (an Authorization header, a client config).
func (v Value) Reveal() string { return v.s }

// IsZero reports whether there is no secret.
func (v Value) IsZero() bool { return v.s == "" }

// Format prints Redacted (or nothing for the zero Value) for every verb.
func (v Value) Format(f fmt.State, _ rune) { writeRedacted(f, v.s == "") }

// String is Redacted.
func (v Value) String() string { return redacted(v.s == "") }

// GoString is Redacted.
func (v Value) GoString() string { return redacted(v.s == "") }

// LogValue keeps the secret out of slog.
func (v Value) LogValue() slog.Value { return slog.StringValue(redacted(v.s == "")) }

// MarshalJSON keeps the secret out of encoding/json.
func (v Value) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted(v.s == "") + `"`), nil }

// MarshalText keeps the secret out of text encoders.
func (v Value) MarshalText() ([]byte, error) { return []byte(redacted(v.s == "")), nil }

func redacted(empty bool) string {
	if empty {
		return ""
	}
	return Redacted
}

func writeRedacted(f fmt.State, empty bool) { _, _ = f.Write([]byte(redacted(empty))) }

// Error is a secret that cannot be resolved. It names the configuration key
// and the reason, never the value.
type Error struct {
	Key    string
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Key, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Key, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }
