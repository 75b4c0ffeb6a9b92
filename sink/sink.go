// Package sink defines the contract between the relay and every consumer of
// the outbox (webhooks, NATS JetStream, the search engine): a consumer takes a
// batch of events and gives one Outcome per event. The relay decides what an
// outcome does to the row (dispatched, retry with backoff, failed). The
// outcome (delivery.Outcome) and the lease fence are defined in package
// delivery, so that the engine layer below, indexer, speaks the same
// vocabulary without importing sink.
//
// Sub-packages implement consumers; sinktest holds the contract suite every
// consumer must pass.
package sink

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/outbox"
)

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
	Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome
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
func Sequential(ctx context.Context, events []*outbox.Event, deliver func(context.Context, *outbox.Event) delivery.Outcome) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
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
