// Package sinktest is the contract suite every consumer (sink.Consumer) must
// pass: delivery; an outage (the destination down: events Unavailable, or
// NotAttempted after their aggregate's head or, with a reason, not sent
// after an earlier failure of the batch; sink.Prober, when implemented,
// fails until the destination is back) and recovery; poison;
// order per aggregate (stop at the first failure, later events
// NotAttempted); redelivery of the same events (idempotent by event id);
// cancellation; fencing (nothing is sent once the lease deadline has passed,
// and every message carries its event's fencing token).
//
// A consumer package runs it against its real destination with a Harness:
//
//	func TestContract(t *testing.T) { sinktest.Run(t, harness{}) }
//
// The suite plays the relay: it builds batches, calls Deliver, and delivers
// again what was not delivered, as the relay does after its backoff.
package sinktest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
)

// Harness adapts one kind of consumer to the suite.
type Harness interface {
	// Start builds a fresh consumer and its destination (its own stream,
	// its own receiver), isolated from every other Start, so that subtests
	// run in parallel. Resources are released with t.Cleanup.
	Start(t *testing.T) Instance
}

// Instance is one consumer under test and its destination.
type Instance interface {
	// Consumer is the consumer under test.
	Consumer() sink.Consumer
	// Received returns what the destination accepted, in arrival order,
	// after the destination's own de-duplication by event id (JetStream's
	// duplicate window; a webhook receiver that honours the idempotency key).
	Received(t *testing.T) []Delivery
	// Break makes the destination unavailable as a whole (the server
	// stopped, the endpoint answering 503) until Repair.
	Break(t *testing.T)
	// Repair undoes Break.
	Repair(t *testing.T)
	// Poison changes e so that the destination rejects it permanently (a
	// message larger than the stream allows, an endpoint answering 400 for
	// it).
	Poison(t *testing.T, e *outbox.Event)
}

// Delivery is one message as the destination holds it.
type Delivery struct {
	// ID is the idempotency key the destination saw (Nats-Msg-Id,
	// webhook-id), which must be the event id.
	ID int64
	// Message is the decoded body.
	Message sink.Message
	// Partition and LeaseEpoch are the values of the headers
	// sink.HeaderPartition and sink.HeaderLeaseEpoch as received ("" when
	// absent).
	Partition, LeaseEpoch string
}

// Timeout bounds each wait of the suite (a Deliver call, a recovery).
var Timeout = 90 * time.Second

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	t.Run("ok", func(t *testing.T) { t.Parallel(); testOK(t, h) })
	t.Run("unavailable", func(t *testing.T) { t.Parallel(); testUnavailable(t, h) })
	t.Run("poison", func(t *testing.T) { t.Parallel(); testPoison(t, h) })
	t.Run("order_per_aggregate", func(t *testing.T) { t.Parallel(); testOrder(t, h) })
	t.Run("redelivery", func(t *testing.T) { t.Parallel(); testRedelivery(t, h) })
	t.Run("cancelled", func(t *testing.T) { t.Parallel(); testCancelled(t, h) })
	t.Run("fencing", func(t *testing.T) { t.Parallel(); testFencing(t, h) })
}

// Events makes events for the suite: ids from a per-instance counter, one
// aggregate per key ("" = no aggregate_id).
type Events struct {
	next atomic.Int64
	aggs map[string]uuid.UUID
}

// Make returns one event per key, in order, with increasing ids.
func (g *Events) Make(keys ...string) []*outbox.Event {
	if g.aggs == nil {
		g.aggs = map[string]uuid.UUID{}
	}
	tenant := uuid.New()
	out := make([]*outbox.Event, len(keys))
	for i, k := range keys {
		id := g.next.Add(1)
		e := &outbox.Event{
			ID:            id,
			EventType:     "entity.customer.updated",
			SchemaVersion: 1,
			AggregateType: "DDM_ENTITY",
			Payload:       json.RawMessage(fmt.Sprintf(`{"version":%d,"after":{"name":"customer %s","n":%d}}`, id, k, id)),
			Status:        outbox.StatusPending,
			CreatedAt:     time.Now().UTC().Truncate(time.Microsecond),
			AvailableAt:   time.Now().UTC(),
		}
		if k != "" {
			a, ok := g.aggs[k]
			if !ok {
				a = uuid.New()
				g.aggs[k] = a
			}
			e.AggregateID = &a
			e.TenantID = &tenant
			corr := uuid.New()
			e.CorrelationID = &corr
		} else {
			e.EventType = "system.tick.created"
			e.AggregateType = "SYSTEM"
		}
		out[i] = e
	}
	return out
}

func deliver(t *testing.T, c sink.Consumer, events []*outbox.Event) []delivery.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	start := time.Now()
	out := c.Deliver(ctx, events)
	if len(out) != len(events) {
		t.Fatalf("Deliver returned %d outcomes for %d events", len(out), len(events))
	}
	if d := time.Since(start); d > Timeout {
		t.Fatalf("Deliver took %s", d)
	}
	return out
}

// DeliverAll plays the relay: it delivers the events, then delivers again
// those not delivered (Retry, Unavailable, NotAttempted) until all are
// delivered or the suite's Timeout passes. A Poison outcome fails the test.
func DeliverAll(t *testing.T, c sink.Consumer, events []*outbox.Event) {
	t.Helper()
	pending := events
	deadline := time.Now().Add(Timeout)
	wait := 10 * time.Millisecond
	for {
		out := deliver(t, c, pending)
		var next []*outbox.Event
		var last delivery.Outcome
		for i, o := range out {
			if o.Kind == delivery.Poison {
				t.Fatalf("event %d: poison: %s", pending[i].ID, o.Reason)
			}
			if !o.Kind.Delivered() {
				next = append(next, pending[i])
				if o.Reason != "" {
					last = o
				}
			}
		}
		pending = next
		if len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events still not delivered after %s (e.g. %s %q)", len(pending), Timeout, last.Kind, last.Reason)
		}
		time.Sleep(wait) // the relay's backoff
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// CheckReceived asserts that the destination holds exactly the events of
// want, each once, in id order per aggregate, with the right idempotency key
// and body.
func CheckReceived(t *testing.T, got []Delivery, want []*outbox.Event) {
	t.Helper()
	byID := map[int64]*outbox.Event{}
	for _, e := range want {
		byID[e.ID] = e
	}
	seen := map[int64]bool{}
	last := map[string]int64{}
	for _, d := range got {
		e, ok := byID[d.ID]
		switch {
		case !ok:
			t.Errorf("received event %d, which was not to be delivered", d.ID)
			continue
		case seen[d.ID]:
			t.Errorf("received event %d twice", d.ID)
			continue
		}
		seen[d.ID] = true
		if d.Message.ID != d.ID {
			t.Errorf("event %d: idempotency key %d differs from the body's id %d", e.ID, d.ID, d.Message.ID)
		}
		checkMessage(t, d.Message, e)
		if k := e.AggregateKey(); k != "" {
			if last[k] > e.ID {
				t.Errorf("aggregate %s: event %d arrived after event %d", k, e.ID, last[k])
			}
			last[k] = e.ID
		}
	}
	for _, e := range want {
		if !seen[e.ID] {
			t.Errorf("event %d was not received", e.ID)
		}
	}
}

func checkMessage(t *testing.T, m sink.Message, e *outbox.Event) {
	t.Helper()
	var gotP, wantP any
	if err := json.Unmarshal(m.Payload, &gotP); err != nil {
		t.Errorf("event %d: payload: %v", e.ID, err)
	}
	if err := json.Unmarshal(e.Payload, &wantP); err != nil {
		t.Errorf("event %d: the event's own payload: %v", e.ID, err)
	}
	if m.EventType != e.EventType || m.AggregateType != e.AggregateType || m.SchemaVersion != e.SchemaVersion ||
		!reflect.DeepEqual(m.AggregateID, e.AggregateID) || !reflect.DeepEqual(m.TenantID, e.TenantID) ||
		!reflect.DeepEqual(m.CorrelationID, e.CorrelationID) || !m.CreatedAt.Equal(e.CreatedAt) || !reflect.DeepEqual(gotP, wantP) {
		t.Errorf("event %d: message %+v does not match the event %+v", e.ID, m, e)
	}
}

func kinds(out []delivery.Outcome) []string {
	s := make([]string, len(out))
	for i, o := range out {
		s[i] = o.Kind.String()
	}
	return s
}

func testOK(t *testing.T, h Harness) {
	in := h.Start(t)
	var g Events
	events := g.Make("a", "b", "", "a", "c", "b", "a", "")
	if out := deliver(t, in.Consumer(), nil); len(out) != 0 {
		t.Fatalf("empty batch: %d outcomes", len(out))
	}
	out := deliver(t, in.Consumer(), events)
	for i, o := range out {
		if o.Kind != delivery.OK {
			t.Fatalf("event %d: %s %s, want ok (all: %v)", events[i].ID, o.Kind, o.Reason, kinds(out))
		}
	}
	CheckReceived(t, in.Received(t), events)
}

func testUnavailable(t *testing.T, h Harness) {
	in := h.Start(t)
	var g Events
	events := g.Make("a", "b", "a", "", "b", "a")
	prober, _ := in.Consumer().(sink.Prober)
	if prober != nil {
		if err := probe(prober); err != nil {
			t.Fatalf("Probe of a working destination: %v", err)
		}
	}
	in.Break(t)
	out := deliver(t, in.Consumer(), events)
	head := map[string]bool{}
	unavailable := 0
	for i, o := range out {
		e := events[i]
		k := e.AggregateKey()
		switch {
		case o.Kind == delivery.Unavailable:
			unavailable++
			if o.Reason == "" {
				t.Errorf("event %d: unavailable without a reason", e.ID)
			}
		case o.Kind == delivery.NotAttempted && k != "" && head[k]:
			// a later event of an aggregate whose head failed
		case o.Kind == delivery.NotAttempted && o.Reason != "":
			// not sent after the destination failed earlier in the batch
		default:
			t.Errorf("event %d while broken: %s %q, want unavailable (or not_attempted after its aggregate's failure, or not sent with a reason)", e.ID, o.Kind, o.Reason)
		}
		if k != "" {
			head[k] = true
		}
	}
	if unavailable == 0 {
		t.Errorf("no event unavailable while broken: %v", kinds(out))
	}
	if prober != nil {
		if err := probe(prober); err == nil {
			t.Errorf("Probe succeeded while the destination is down")
		} else if err.Error() == "" {
			t.Errorf("Probe failed without a reason")
		}
	}
	in.Repair(t)
	if prober != nil {
		// The relay probes with capped backoff until a probe succeeds.
		deadline := time.Now().Add(Timeout)
		wait := 10 * time.Millisecond
		for err := probe(prober); err != nil; err = probe(prober) {
			if time.Now().After(deadline) {
				t.Fatalf("Probe still fails %s after the repair: %v", Timeout, err)
			}
			time.Sleep(wait) // the relay's probe backoff
			wait = min(2*wait, 500*time.Millisecond)
		}
	}
	DeliverAll(t, in.Consumer(), events)
	CheckReceived(t, in.Received(t), events)
}

func probe(p sink.Prober) error {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	return p.Probe(ctx)
}

func testPoison(t *testing.T, h Harness) {
	in := h.Start(t)
	var g Events
	events := g.Make("a", "a", "a", "b", "", "")
	in.Poison(t, events[1]) // the second event of a
	in.Poison(t, events[4]) // an event without aggregate
	out := deliver(t, in.Consumer(), events)
	want := []delivery.Kind{delivery.OK, delivery.Poison, delivery.NotAttempted, delivery.OK, delivery.Poison, delivery.OK}
	for i, o := range out {
		if o.Kind != want[i] {
			t.Errorf("event %d: %s %q, want %s", events[i].ID, o.Kind, o.Reason, want[i])
		}
		if o.Kind == delivery.Poison && o.Reason == "" {
			t.Errorf("event %d: poison without a reason", events[i].ID)
		}
	}
	CheckReceived(t, in.Received(t), []*outbox.Event{events[0], events[3], events[5]})
}

func testOrder(t *testing.T, h Harness) {
	in := h.Start(t)
	var g Events
	// 12 aggregates with 1 to 6 events each, interleaved in one batch, then
	// a second batch that continues them.
	var keys []string
	for round := range 6 {
		for a := range 12 {
			if round <= a%6 {
				keys = append(keys, fmt.Sprintf("agg%d", a))
			}
		}
	}
	first := g.Make(keys...)
	second := g.Make(keys[:20]...)
	DeliverAll(t, in.Consumer(), first)
	DeliverAll(t, in.Consumer(), second)
	CheckReceived(t, in.Received(t), append(first, second...))

	// Stop at the first failure: a poisoned head blocks the rest of its
	// aggregate in the batch, other aggregates flow.
	third := g.Make("agg0", "agg0", "agg1", "agg0", "agg1")
	in.Poison(t, third[1])
	out := deliver(t, in.Consumer(), third)
	want := []delivery.Kind{delivery.OK, delivery.Poison, delivery.OK, delivery.NotAttempted, delivery.OK}
	for i, o := range out {
		if o.Kind != want[i] {
			t.Errorf("event %d: %s %q, want %s", third[i].ID, o.Kind, o.Reason, want[i])
		}
	}
	CheckReceived(t, in.Received(t), append(append(first, second...), third[0], third[2], third[4]))
}

func testRedelivery(t *testing.T, h Harness) {
	in := h.Start(t)
	var g Events
	events := g.Make("a", "b", "a", "", "c", "b")
	DeliverAll(t, in.Consumer(), events)
	// A relay crashed after delivering and before acknowledging: the same
	// events come again, alone and mixed with new ones.
	for i, o := range deliver(t, in.Consumer(), events) {
		if !o.Kind.Delivered() {
			t.Errorf("redelivered event %d: %s %q, want ok or stale", events[i].ID, o.Kind, o.Reason)
		}
	}
	more := g.Make("a", "d")
	again := append([]*outbox.Event{events[2], events[5]}, more...)
	for i, o := range deliver(t, in.Consumer(), again) {
		if !o.Kind.Delivered() {
			t.Errorf("event %d: %s %q, want ok or stale", again[i].ID, o.Kind, o.Reason)
		}
	}
	CheckReceived(t, in.Received(t), append(events, more...))
}

func testCancelled(t *testing.T, h Harness) {
	in := h.Start(t)
	var g Events
	events := g.Make("a", "a", "b", "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := in.Consumer().Deliver(ctx, events)
	if len(out) != len(events) {
		t.Fatalf("Deliver returned %d outcomes for %d events", len(out), len(events))
	}
	for i, o := range out {
		if o.Kind != delivery.NotAttempted && o.Kind != delivery.Retry {
			t.Errorf("event %d with a cancelled context: %s %q, want not_attempted or retry", events[i].ID, o.Kind, o.Reason)
		}
	}
	// The relay delivers them later.
	DeliverAll(t, in.Consumer(), events)
	CheckReceived(t, in.Received(t), events)
}

// lease is a delivery.Lease for the suite: partition = event id mod 16, a fixed
// epoch, and a deadline that has passed when expired is set.
type lease struct {
	epoch   int64
	expired atomic.Bool
}

func (l *lease) Token(e *outbox.Event) (int, int64, bool) { return int(e.ID % 16), l.epoch, true }

func (l *lease) Check() error {
	if l.expired.Load() {
		return delivery.ErrLeaseExpired
	}
	return nil
}

func testFencing(t *testing.T, h Harness) {
	in := h.Start(t)
	var g Events
	events := g.Make("a", "b", "a", "")
	l := &lease{epoch: 7}
	ctx, cancel := context.WithTimeout(delivery.WithLease(context.Background(), l), Timeout)
	defer cancel()
	for i, o := range in.Consumer().Deliver(ctx, events) {
		if o.Kind != delivery.OK {
			t.Fatalf("event %d with a valid lease: %s %q", events[i].ID, o.Kind, o.Reason)
		}
	}
	got := in.Received(t)
	CheckReceived(t, got, events)
	for _, d := range got {
		if want := fmt.Sprint(d.ID % 16); d.Partition != want || d.LeaseEpoch != "7" {
			t.Errorf("event %d: fencing token partition %q epoch %q, want %q and 7", d.ID, d.Partition, d.LeaseEpoch, want)
		}
	}

	// Past the lease deadline nothing is sent.
	l.expired.Store(true)
	late := g.Make("a", "c", "", "c")
	for i, o := range in.Consumer().Deliver(ctx, late) {
		if o.Kind != delivery.NotAttempted {
			t.Errorf("event %d after the lease deadline: %s %q, want not_attempted", late[i].ID, o.Kind, o.Reason)
		}
	}
	CheckReceived(t, in.Received(t), events)
}
