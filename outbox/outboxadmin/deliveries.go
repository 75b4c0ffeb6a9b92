package outboxadmin

import (
	"slices"
	"time"

	"github.com/searchsync/searchsync/outbox"
)

// DeliveryState is the state of one consumer's row of an event in
// aa_outbox_delivery (docs/consumers.md).
type DeliveryState string

// The states of a delivery row.
const (
	DeliveryDone    DeliveryState = "done"
	DeliveryPending DeliveryState = "pending"
	DeliveryFailed  DeliveryState = "failed"
)

// Delivery is one consumer's state of an event.
type Delivery struct {
	Consumer    string        `json:"consumer"`
	State       DeliveryState `json:"state"`
	Attempts    int           `json:"attempts"`
	LastError   *string       `json:"last_error"`
	AvailableAt time.Time     `json:"available_at"`
	DeliveredAt *time.Time    `json:"delivered_at,omitempty"`
	// Shared is true when the event has no delivery rows (its routed
	// consumers have not diverged): the state, attempts, last_error and
	// available_at are then the outbox row's, shared by every routed
	// consumer.
	Shared bool `json:"shared,omitempty"`
}

// Listed is an event as the operator commands show it: the outbox row and,
// when its consumers diverged, every routed consumer's delivery row (by
// consumer name). With Filter.Consumer an event without delivery rows gets
// that consumer's shared state (Delivery.Shared).
type Listed struct {
	outbox.Event
	Deliveries []Delivery `json:"deliveries,omitempty"`
}

// Delivery returns the consumer's state of the event, nil when it has none
// listed.
func (l *Listed) Delivery(consumer string) *Delivery {
	for i := range l.Deliveries {
		if l.Deliveries[i].Consumer == consumer {
			return &l.Deliveries[i]
		}
	}
	return nil
}

// split reports whether the event has delivery rows of its own.
func (l *Listed) split() bool {
	return slices.ContainsFunc(l.Deliveries, func(d Delivery) bool { return !d.Shared })
}

// Deliveries is every routed consumer's state of the event, in the order of
// the configured consumers: its delivery row when the consumers diverged,
// else the outbox row's state shared by them all (Delivery.Shared; a
// dispatched event is done for each, a skipped one skipped). Without
// routing (WithRouting) it is the event's delivery rows.
func (a *Admin) Deliveries(l Listed) []Delivery {
	if a.routing == nil {
		return slices.Clone(l.Deliveries)
	}
	out := []Delivery{}
	for _, c := range a.routing.To(l.EventType, l.AggregateType) {
		if d := l.Delivery(c); d != nil && !d.Shared {
			out = append(out, *d)
			continue
		}
		d := Delivery{Consumer: c, Attempts: l.Attempts, LastError: l.LastError, AvailableAt: l.AvailableAt, Shared: true}
		switch l.Status {
		case outbox.StatusDispatched:
			d.State, d.DeliveredAt = DeliveryDone, l.DispatchedAt
		case outbox.StatusFailed:
			d.State = DeliveryFailed
		case outbox.StatusSkipped:
			d.State = DeliveryState(outbox.StatusSkipped)
		default:
			d.State = DeliveryPending
		}
		out = append(out, d)
	}
	return out
}
