package relay

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
)

// A delivered batch is passed per aggregate: an aggregate all of whose
// events are dispatched or skipped with nothing else to write is left out
// by event id, every other one whole (once), and events without an
// aggregate by id.
func TestExclusionPassesOnlyCleanAggregates(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	ev := func(id int64, agg *uuid.UUID) claimed {
		ce := claimed{}
		ce.ev.ID, ce.ev.AggregateID = id, agg
		return ce
	}
	evs := []claimed{ev(1, &a), ev(2, &b), ev(3, &a), ev(4, &b), ev(5, nil), ev(6, &c), ev(7, &c)}
	acks := []ackRow{
		{id: 1, outcome: "dispatched"}, {id: 3, outcome: "skipped"}, // a: passed
		{id: 2, outcome: "dispatched"}, {id: 4, outcome: "retry", lastError: "502"}, // b: a retry
		{id: 5, outcome: "dispatched"},
		{id: 6, outcome: "dispatched", rows: []deliveryRow{{consumer: "hook", state: "pending"}}}, // c: diverged
		// 7: untouched (no ack row): c stays out whole anyway
	}
	x := &exclusion{}
	if !x.add(evs, acks) {
		t.Fatal("add reported nothing passed")
	}
	if !slices.Equal(x.ids, []int64{1, 3, 5}) {
		t.Errorf("ids left out %v, want [1 3 5]", x.ids)
	}
	if want := [][16]byte{b, c}; !slices.Equal(x.aggs, want) {
		t.Errorf("aggregates left out %v, want %v (each once)", x.aggs, want)
	}

	// Still being delivered (no acks): every aggregate whole.
	x = &exclusion{}
	if x.add(evs, nil) {
		t.Error("a batch without acks was passed")
	}
	if want := [][16]byte{a, b, c}; !slices.Equal(x.aggs, want) || !slices.Equal(x.ids, []int64{5}) {
		t.Errorf("undelivered batch: aggregates %v ids %v, want %v and [5]", x.aggs, x.ids, want)
	}
}

// The ack of a batch that passed others starts only once theirs returned,
// and is abandoned, not run, when one of them did not record every outcome.
func TestAckWaitsForThePassedBatches(t *testing.T) {
	r := &Relay{moved: make(chan struct{}, 1)}
	r.leases = newLeases(nil, &r.q, &r.cfg)
	delivered := make(chan struct{})
	close(delivered)
	older := &flight{delivered: delivered, acked: make(chan struct{})} // its ack runs
	later := &flight{delivered: delivered, after: []*flight{older}, acks: []ackRow{{id: 9, outcome: "dispatched"}}}
	r.window = []*flight{older, later}

	if acked, err := r.step(context.Background()); acked || err != nil {
		t.Fatalf("step: acked %v, err %v while no ack returned", acked, err)
	}
	if later.acked != nil {
		t.Fatal("the later batch's ack started before the ack of the batch it passed returned")
	}

	older.clean = false // fenced, say
	close(older.acked)
	if _, err := r.step(context.Background()); err != nil {
		t.Fatalf("step: %v", err)
	}
	if later.acked == nil || !closed(later.acked) || later.ackErr == nil {
		t.Fatalf("the later batch was not abandoned after the passed batch's ack failed: acked %v, err %v", later.acked, later.ackErr)
	}
	<-r.moved // abandon signals the worker
	acked, err := r.step(context.Background())
	if !acked || err == nil {
		t.Fatalf("step after the abandon: acked %v, err %v; want the abandoned batch's error", acked, err)
	}
	if len(r.window) != 0 {
		t.Errorf("%d batches left in the window", len(r.window))
	}
}
