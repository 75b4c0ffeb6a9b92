package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
)

// Status is the delivery state of an event (the enum mdm.outbox_status).
type Status string

// The states of an event.
const (
	StatusPending    Status = "pending"
	StatusDispatched Status = "dispatched"
	StatusFailed     Status = "failed"
	StatusSkipped    Status = "skipped"
)

// Event is one row of the outbox. Producers fill the fields up to Payload
// (and CreatedBy when they want to name the actor); the database sets the rest.
type Event struct {
	ID            int64           `json:"id"`
	TenantID      *uuid.UUID      `json:"tenant_id"`
	EventType     string          `json:"event_type"`
	SchemaVersion int             `json:"schema_version"` // to Write, 0 means the default, 1; read back, below 1 is poison
	AggregateType string          `json:"aggregate_type"`
	AggregateID   *uuid.UUID      `json:"aggregate_id"`
	AuditLogID    *int64          `json:"audit_log_id"`
	CorrelationID *uuid.UUID      `json:"correlation_id"`
	Payload       json.RawMessage `json:"payload"`

	Status       Status     `json:"status"`
	Attempts     int        `json:"attempts"`
	LastError    *string    `json:"last_error"`
	AvailableAt  time.Time  `json:"available_at"`
	DispatchedAt *time.Time `json:"dispatched_at"`
	CreatedAt    time.Time  `json:"created_at"`
	CreatedBy    string     `json:"created_by"` // "" means the database user
}

// AggregateKey is the ordering key of an event: "<aggregate_type>/<aggregate_id>",
// or "" for an event without an aggregate_id.
func (e *Event) AggregateKey() string {
	if e.AggregateID == nil {
		return ""
	}
	return e.AggregateType + "/" + e.AggregateID.String()
}

// The patterns of the event and aggregate types Write accepts (RE2 and
// PostgreSQL regular expressions alike).
const (
	// EventTypePattern is <object>.<type?>.<verb>: two or three lower-case
	// segments.
	EventTypePattern = `^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*){1,2}$`
	// AggregateTypePattern is a table-like name.
	AggregateTypePattern = `^[A-Za-z][A-Za-z0-9_]*$`
)

var (
	eventTypeRE     = regexp.MustCompile(EventTypePattern)
	aggregateTypeRE = regexp.MustCompile(AggregateTypePattern)
)

// FieldError says which field of which event is invalid.
type FieldError struct {
	Index  int    // position of the event in the Write call
	Field  string // column name, e.g. event_type
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("outbox: event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Validate checks the event as a producer gives it. index is its position in
// the call, used in errors. It returns every problem, joined.
func (e *Event) Validate(index int) error {
	var errs []error
	bad := func(field, reason string) {
		errs = append(errs, &FieldError{Index: index, Field: field, Reason: reason})
	}
	switch {
	case e.EventType == "":
		bad("event_type", "is required")
	case !eventTypeRE.MatchString(e.EventType):
		bad("event_type", fmt.Sprintf("%q does not follow <object>.<type?>.<verb> (lower case, e.g. entity.customer.updated)", e.EventType))
	}
	if e.SchemaVersion < 0 {
		bad("schema_version", fmt.Sprintf("%d is not >= 1", e.SchemaVersion))
	}
	switch {
	case e.AggregateType == "":
		bad("aggregate_type", "is required")
	case !aggregateTypeRE.MatchString(e.AggregateType):
		bad("aggregate_type", fmt.Sprintf("%q is not a table-like name (e.g. DDM_ENTITY)", e.AggregateType))
	}
	if e.AggregateID != nil && *e.AggregateID == uuid.Nil {
		bad("aggregate_id", "is the nil UUID; leave it unset for an event without an aggregate")
	}
	p := bytes.TrimSpace(e.Payload)
	switch {
	case len(p) == 0:
		bad("payload", "is required (a JSON object)")
	case !json.Valid(p):
		bad("payload", "is not valid JSON")
	case p[0] != '{':
		bad("payload", "must be a JSON object")
	}
	return errors.Join(errs...)
}

// HeldSQL is the available_at, as an SQL literal, of an event or delivery row
// held back for a paused consumer (docs/consumers.md): far enough to keep it
// out of every claim and off the indexes' "available now" ranges until the
// consumer resumes and the relay sets it to now(). It is a finite timestamp,
// so that every reader can scan it as a time.
const HeldSQL = `'9999-12-31 00:00:00+00'::timestamptz`
