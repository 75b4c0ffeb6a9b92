package secret

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const hush = "s3cr3t-Value-42"

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	nl := filepath.Join(dir, "nl")
	crlf := filepath.Join(dir, "crlf")
	two := filepath.Join(dir, "two")
	empty := filepath.Join(dir, "empty")
	for p, c := range map[string]string{nl: hush + "\n", crlf: hush + "\r\n", two: hush + "\n\n", empty: "\n"} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("SECRET_TEST_SET", hush)
	t.Setenv("SECRET_TEST_EMPTY", "")

	for _, tc := range []struct {
		ref, want, err string
	}{
		{ref: hush, want: hush},
		{ref: "", want: ""},
		{ref: "env:SECRET_TEST_SET", want: hush},
		{ref: "env:SECRET_TEST_UNSET_XYZ", err: "engine.password: environment variable SECRET_TEST_UNSET_XYZ is not set"},
		{ref: "env:SECRET_TEST_EMPTY", err: "engine.password: environment variable SECRET_TEST_EMPTY is empty"},
		{ref: "env:", err: `engine.password: "env:" names no environment variable`},
		{ref: "file:" + nl, want: hush},
		{ref: "file:" + crlf, want: hush},
		{ref: "file:" + two, want: hush + "\n"}, // only one trailing newline goes
		{ref: "file:" + empty, err: "is empty"},
		{ref: "file:" + filepath.Join(dir, "missing"), err: "engine.password: cannot read secret file: open " + filepath.Join(dir, "missing")},
		{ref: "file:", err: `"file:" names no file`},
	} {
		v, err := Ref(tc.ref).Resolve("engine.password")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Resolve(%s): err %v, want %q", Ref(tc.ref).Source(), err, tc.err)
			}
			var se *Error
			if !errors.As(err, &se) || se.Key != "engine.password" {
				t.Errorf("Resolve(%s): err %T does not carry the key", Ref(tc.ref).Source(), err)
			}
			if err != nil && strings.Contains(err.Error(), hush) {
				t.Errorf("error leaks the secret: %v", err)
			}
			continue
		}
		if err != nil || v.Reveal() != tc.want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", Ref(tc.ref).Source(), v.Reveal(), err, tc.want)
		}
	}
	if err := Ref("file:" + filepath.Join(dir, "missing")).Check("k"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file should unwrap to os.ErrNotExist: %v", err)
	}
}

func TestSource(t *testing.T) {
	for ref, want := range map[string]string{"": "", hush: "literal", "env:X": "env:X", "file:/a/b": "file:/a/b"} {
		if got := Ref(ref).Source(); got != want {
			t.Errorf("Source(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestRedacted prints a Value and a Ref every way a program might and finds
// the secret nowhere.
func TestRedacted(t *testing.T) {
	type holder struct {
		Password Value
		Ref      Ref
		Ptr      *Value
		Map      map[string]Value
	}
	v := New(hush)
	h := holder{Password: v, Ref: Ref(hush), Ptr: &v, Map: map[string]Value{"k": v}}
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%T"} {
		fmt.Fprintf(&out, verb+"\n", v)
		fmt.Fprintf(&out, verb+"\n", Ref(hush))
		fmt.Fprintf(&out, verb+"\n", h)
		fmt.Fprintf(&out, verb+"\n", &h)
	}
	fmt.Fprintln(&out, v, Ref(hush), h)
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	out.Write(b)
	for _, hd := range []slog.Handler{slog.NewJSONHandler(&out, nil), slog.NewTextHandler(&out, nil)} {
		l := slog.New(hd)
		l.Info("x", "password", v, "ref", Ref(hush), "holder", h, "err", fmt.Errorf("wrapped %v", v))
	}
	if strings.Contains(out.String(), hush) {
		t.Fatalf("secret printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), Redacted) {
		t.Fatalf("no %s marker in:\n%s", Redacted, out.String())
	}
	if fmt.Sprint(Value{}) != "" || fmt.Sprint(Ref("")) != "" {
		t.Error("an empty secret should print as nothing")
	}
}
