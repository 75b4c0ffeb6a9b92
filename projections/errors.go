package projections

import (
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

func poison(e *outbox.Event, projection, format string, args ...any) *PoisonError {
	return &PoisonError{EventID: e.ID, EventType: e.EventType, Projection: projection, Reason: fmt.Sprintf(format, args...)}
}

// DeclError is an invalid projection declaration: which projection, which
// key (e.g. fields[2].type) and why; File and Line are set when it came from
// a file.
type DeclError struct {
	File       string
	Line       int
	Projection string
	Key        string
	Reason     string
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
		return fmt.Sprintf("%s: projection %q: %s: %s", loc, e.Projection, e.Key, e.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Reason)
}
