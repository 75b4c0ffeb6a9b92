package projections

import (
	"errors"
	"fmt"

	"github.com/searchsync/searchsync/outbox"
)

// PoisonError is an event that no retry can make projectable: a missing or
// unusable version, an unknown schema_version, a value of the wrong type.
type PoisonError struct {
	EventID    int64
	EventType  string
	Projection string // "" when the error came before a projection was chosen
	Reason     string
	// Path is the dotted payload path (or @column, e.g. @schema_version) the
	// error is about, "" when it is about none. Error does not show it: the
	// Reason names it where it matters.
	Path string
}

func (e *PoisonError) Error() string {
	where := "projection"
	if e.Projection != "" {
		where = "projection " + e.Projection
	}
	return fmt.Sprintf("%s: event %d (%s): %s", where, e.EventID, e.EventType, e.Reason)
}

// The console's error patterns (outbox's Filter.Error: * any text, ? one
// character, case-insensitive, anywhere in last_error) that select the
// reasons of this package; the console's error classes list them
// (dashboard.ErrorClasses) and TestReasonPatterns holds them to the text.
const (
	// PoisonPattern: a *PoisonError, "projection NAME: event ID (TYPE):
	// REASON".
	PoisonPattern = "projection*: event *"
	// SchemaVersionPattern: Set.Upcast's reasons about a schema_version
	// that is unknown or has no upcaster.
	SchemaVersionPattern = "schema_version"
)

// poison is a *PoisonError about e in projection ("" before one was chosen)
// and about path ("" for none).
func poison(e *outbox.Event, projection, path, format string, args ...any) *PoisonError {
	return &PoisonError{EventID: e.ID, EventType: e.EventType, Projection: projection, Path: path, Reason: fmt.Sprintf(format, args...)}
}

// schemaVersionPath is the Path of the errors about the schema_version
// column: unknown, below 1, no upcaster, a failed upcaster.
const schemaVersionPath = "@schema_version"

// objectError is an error about a value on a payload path that is not an
// object (an upcaster step's); path is that path.
type objectError struct {
	path string
	msg  string
}

func (e *objectError) Error() string { return e.msg }

// notObject is the objectError for the value v at path.
func notObject(path string, v any) error {
	return &objectError{path: path, msg: fmt.Sprintf("%s is %s, not an object", path, kind(v))}
}

// upcasterPath is the Path of a failed upcaster's error: the path its own
// error is about (an *objectError's, or a *PoisonError's a Go upcaster
// returned), else @schema_version.
func upcasterPath(err error) string {
	if oe, ok := errors.AsType[*objectError](err); ok {
		return oe.path
	}
	if pe, ok := errors.AsType[*PoisonError](err); ok && pe.Path != "" {
		return pe.Path
	}
	return schemaVersionPath
}

// DeclError is an invalid projection declaration: which projection, which
// key (e.g. fields[2].type) and why; File and Line are set when it came from
// a file.
type DeclError struct {
	File       string
	Line       int
	Projection string
	// Relation says that Projection names a relation (`relations:`).
	Relation bool
	Key      string
	Reason   string
}

func (e *DeclError) Error() string {
	loc := "projections"
	if e.File != "" {
		loc = "projections " + e.File
		if e.Line > 0 {
			loc = fmt.Sprintf("%s:%d", loc, e.Line)
		}
	}
	if e.Projection != "" {
		what := "projection"
		if e.Relation {
			what = "relation"
		}
		return fmt.Sprintf("%s: %s %q: %s: %s", loc, what, e.Projection, e.Key, e.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Reason)
}
