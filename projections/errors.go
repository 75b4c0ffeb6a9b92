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

func poison(e *outbox.Event, projection, format string, args ...any) *PoisonError {
	return &PoisonError{EventID: e.ID, EventType: e.EventType, Projection: projection, Reason: fmt.Sprintf(format, args...)}
}
