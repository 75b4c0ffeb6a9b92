package search_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
)

// startRelay runs a relay that routes entity.customer.* to the consumer.
func (b *bundle) startRelay(cons sink.Consumer, batchSize int) *relay.Relay {
	b.t.Helper()
	r, err := relay.New(b.db.Pool, relay.Config{Schema: b.db.Schema, Partitions: 4, LeaseTTL: 3 * time.Second,
		PollInterval: 100 * time.Millisecond, MaxAttempts: 3, BatchSize: batchSize,
		Logger: slog.New(slog.DiscardHandler),
		Routes: []relay.Route{{Consumer: cons, Match: func(et, at string) bool {
			return strings.HasPrefix(et, "entity.customer.") && at == customer.AggregateType
		}}}})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	b.t.Cleanup(func() { cancel(); <-done })
	return r
}

func (b *bundle) status(id int64) (outbox.Status, string) {
	var st string
	var le *string
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT status::text, last_error FROM aa_outbox_event WHERE id = $1`, id).Scan(&st, &le); err != nil {
		b.t.Fatal(err)
	}
	if le == nil {
		return outbox.Status(st), ""
	}
	return outbox.Status(st), *le
}

// Through the relay: events written by the producer API become searchable
// documents; poison ends failed with the reason while the others flow.
func TestThroughRelay(t *testing.T) {
	b := setup(t)
	b.startRelay(b.cons, 0)
	ids := make([]uuid.UUID, 20)
	var evs []outbox.Event
	for i := range ids {
		ids[i] = uuid.New()
		evs = append(evs, customer.Created(ch(ids[i], 1, map[string]any{"status": "active"})),
			customer.Updated(ch(ids[i], 2, map[string]any{"display_name": "n"})))
	}
	bad := ch(uuid.New(), 1, map[string]any{"credit_limit": "lots"})
	evs = append(evs, customer.Created(bad))
	written := b.produce(evs...)
	badID := written[len(written)-1].ID

	testenv.Eventually(t, 60*time.Second, func() bool {
		st, _ := b.status(badID)
		return st == outbox.StatusFailed && b.searchable(b.alias, `{"term":{"display_name":"n"}}`) == int64(len(ids))
	}, "documents searchable and the poison event failed")
	_, lastErr := b.status(badID)
	if !strings.Contains(lastErr, "mapper_parsing_exception") {
		t.Fatalf("last_error %q", lastErr)
	}
	for _, e := range written[:len(written)-1] {
		if st, le := b.status(e.ID); st != outbox.StatusDispatched {
			t.Fatalf("event %d: %s %s", e.ID, st, le)
		}
	}
}
