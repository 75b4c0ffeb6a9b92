// Package sink defines the contract between the relay and every consumer of
// the outbox (webhooks, NATS JetStream, the search engine): a consumer takes a
// batch of events and gives one Outcome per event. The relay decides what an
// outcome does to the row (dispatched, retry with backoff, failed).
//
// Sub-packages implement consumers; sinktest holds the contract suite every
// consumer must pass.
package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/outbox"
)

// Kind is what happened to one event at one consumer.
type Kind int

const (
	// NotAttempted: the consumer did not try the event (an earlier event of
	// its aggregate in the same batch did not succeed, or the batch was
	// cancelled). The relay leaves the row as it is.
	NotAttempted Kind = iota
	// OK: delivered.
	OK
	// Stale: the consumer already holds this or a newer version (a 409
	// version conflict); counts as delivered.
	Stale
	// Retry: a failure of this event that another try may fix (an item
	// answered 5xx while its neighbours were written); the relay adds an
	// attempt and retries with backoff until the attempts run out.
	Retry
	// Poison: retrying cannot help (a mapping rejection, a payload without a
	// version, an unknown schema_version, a 4xx); the event becomes failed.
	Poison
	// Unavailable: the consumer as a whole cannot deliver now (connection
	// refused or reset, DNS, TLS handshake, timeout, the whole request
	// answered 429/5xx, a cluster block, a missing index or alias, NATS
	// without JetStream). It is not the event's fault: when the consumer
	// delivered nothing else in the batch the relay pauses the consumer and
	// probes it; the event's attempts do not move. When the consumer did
	// deliver other events of the batch (the outage began mid-batch, one
	// index of several is blocked) the event is tried again shortly, still
	// without an attempt — unless the outcome is Suspect.
	Unavailable
)

func (k Kind) String() string {
	switch k {
	case OK:
		return "ok"
	case Stale:
		return "stale"
	case Retry:
		return "retry"
	case Poison:
		return "poison"
	case Unavailable:
		return "unavailable"
	default:
		return "not_attempted"
	}
}

// Delivered reports whether the kind counts as a successful delivery.
func (k Kind) Delivered() bool { return k == OK || k == Stale }

// Outcome is the result for one event. Reason says what the consumer or the
// remote end said; the relay writes it to last_error prefixed by the
// consumer's name.
type Outcome struct {
	Kind   Kind
	Reason string
	// RetryAfter, for Retry and Unavailable, is how long the remote end asked
	// to be left alone (an HTTP Retry-After); the relay waits at least this
	// long before the next try or probe, and longer when its own backoff
	// says so. Zero: the relay's backoff alone.
	RetryAfter time.Duration
	// Suspect, for Unavailable, says the answer may be about this event
	// rather than the whole consumer (an endpoint's HTTP 500 to one request):
	// when the consumer delivered other events of the batch, the relay
	// counts it as the event's Retry, so that an event that alone keeps
	// failing ends failed after max_attempts.
	Suspect bool
}

// Ok, Retryf and Poisonf build outcomes.
func Ok() Outcome { return Outcome{Kind: OK} }

// Retryf is a transient failure.
func Retryf(format string, args ...any) Outcome {
	return Outcome{Kind: Retry, Reason: fmt.Sprintf(format, args...)}
}

// Poisonf is a permanent failure.
func Poisonf(format string, args ...any) Outcome {
	return Outcome{Kind: Poison, Reason: fmt.Sprintf(format, args...)}
}

// Unavailablef is a consumer-wide failure (see Unavailable).
func Unavailablef(format string, args ...any) Outcome {
	return Outcome{Kind: Unavailable, Reason: fmt.Sprintf(format, args...)}
}

// Consumer delivers events somewhere.
//
// Deliver receives a batch in which the events of one aggregate appear in id
// order (several per aggregate are possible; events of different aggregates
// are independent). It returns exactly one Outcome per event, in the order of
// events. Per aggregate it must stop at the first event that is not delivered
// and report the aggregate's later events as NotAttempted, so that order per
// aggregate holds. Deliver must be safe to call again with the same events
// (at-least-once): use the event id as the idempotency key.
type Consumer interface {
	Name() string
	Deliver(ctx context.Context, events []*outbox.Event) []Outcome
}

// Prober is implemented by consumers that can tell cheaply whether they
// could deliver again (a cluster health request, a JetStream account info).
// While a consumer is paused the relay calls Probe with capped backoff; nil
// resumes it. A consumer without Probe is probed by delivering its next
// batch.
//
// A wrapper (metrics, tracing) that always has the method returns
// ErrNoProbe when the consumer it wraps has none.
type Prober interface {
	Probe(ctx context.Context) error
}

// ErrNoProbe is what a wrapper's Probe returns when the wrapped consumer has
// no probe of its own.
var ErrNoProbe = errors.New("sink: the consumer has no probe")

// Closer is implemented by consumers that hold connections.
type Closer interface {
	Close() error
}

// Message is the JSON body that webhook and queue consumers send for an event.
type Message struct {
	ID            int64           `json:"id"`
	EventType     string          `json:"event_type"`
	SchemaVersion int             `json:"schema_version"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   *uuid.UUID      `json:"aggregate_id"`
	TenantID      *uuid.UUID      `json:"tenant_id"`
	CorrelationID *uuid.UUID      `json:"correlation_id"`
	AuditLogID    *int64          `json:"audit_log_id"`
	CreatedAt     time.Time       `json:"created_at"`
	Payload       json.RawMessage `json:"payload"`
}

// Body encodes the message of an event.
func Body(e *outbox.Event) ([]byte, error) {
	return json.Marshal(Message{
		ID: e.ID, EventType: e.EventType, SchemaVersion: e.SchemaVersion, AggregateType: e.AggregateType,
		AggregateID: e.AggregateID, TenantID: e.TenantID, CorrelationID: e.CorrelationID,
		AuditLogID: e.AuditLogID, CreatedAt: e.CreatedAt.UTC(), Payload: e.Payload,
	})
}

// Sequential delivers events one by one with deliver, stopping per aggregate
// at the first failure; a helper for consumers without batching of their own
// (they can run aggregates concurrently inside deliver's caller instead).
func Sequential(ctx context.Context, events []*outbox.Event, deliver func(context.Context, *outbox.Event) Outcome) []Outcome {
	out := make([]Outcome, len(events))
	blocked := map[string]bool{}
	for i, e := range events {
		key := e.AggregateKey()
		if key != "" && blocked[key] {
			continue // NotAttempted
		}
		if ctx.Err() != nil {
			continue
		}
		out[i] = deliver(ctx, e)
		if !out[i].Kind.Delivered() && key != "" {
			blocked[key] = true
		}
	}
	return out
}
