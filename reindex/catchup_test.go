package reindex

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
)

// The replay writes pending events to the new index before the relay has
// delivered them to the live one. The check waits for the live consumers
// to deliver them (the relay here starts only once the reindex waits), and
// then finds both indexes equal.
func TestCheckWaitsForTheLiveConsumers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	def1, pending := b.liveWithPending(300) // no relay runs yet

	cfg := b.config(b.def(emailAsText))
	cfg.CatchUpStall = 3 * time.Minute // the relay starts only once the reindex waits
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { _, err := r.Run(b.ctx); runErr <- err }()
	waiting := func() bool {
		select {
		case err := <-runErr:
			t.Fatalf("the reindex ended before it waited for the live consumers: %v", err)
		default:
		}
		p := r.snapshot()
		return p.Phase == PhaseVerify && p.Owed > 0
	}
	testenv.Eventually(t, 2*time.Minute, waiting, "the check waits for the live consumers")
	if owed := r.snapshot().Owed; owed > pending {
		t.Fatalf("owed %d, but only %d customer events are pending", owed, pending)
	}
	t.Logf("waiting for %d of %d pending events", r.snapshot().Owed, pending)

	stopRelay := b.startRelay(def1, nil)
	defer stopRelay()
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("reindex after the relay delivered: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the reindex did not finish within 3m of the relay's start")
	}
	if n := r.snapshot().Owed; n != 0 {
		t.Errorf("progress still owes %d events after the check", n)
	}
	testenv.Eventually(t, time.Minute, func() bool { return b.undelivered() == 0 }, "the outbox drained")
	b.checkTruth(b.alias)
}

// With no relay running, the check waits only CatchUpStall, then fails
// with a report that says how many events the live index lacked. Events
// whose consumers went different ways count only when a search consumer
// of the alias still owes them.
func TestCheckReportsWhatTheLiveConsumersOwe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, pending := b.liveWithPending(200)

	// Two pending events whose consumers went different ways: the search
	// consumer has the first, owes the second.
	var ids []int64
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id FROM aa_outbox_event WHERE status = 'pending' AND event_type LIKE 'entity.customer.%' ORDER BY id LIMIT 2`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil || len(ids) != 2 {
		t.Fatalf("pending events %v: %v", ids, rows.Err())
	}
	_, err = b.db.Pool.Exec(b.ctx, `
INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state)
SELECT e.id, c.consumer, e.aggregate_type, e.aggregate_id, c.state
FROM aa_outbox_event e
JOIN (VALUES ($1::bigint, 'search', 'done'), ($1, 'webhook', 'pending'),
             ($2::bigint, 'search', 'pending'), ($2, 'webhook', 'done')) AS c(id, consumer, state) ON c.id = e.id`, ids[0], ids[1])
	if err != nil {
		t.Fatal(err)
	}

	cfg := b.config(b.def(emailAsText))
	cfg.Consumers = []string{"search"}
	cfg.CatchUpStall = time.Second
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = r.Run(b.ctx)
	var ce *CheckError
	if !errors.As(err, &ce) {
		t.Fatalf("reindex with nothing delivering: %v, want a failed check", err)
	}
	t.Logf("failed after %s:\n%s", time.Since(start).Round(time.Millisecond), ce.Report)
	if want := pending - 1; ce.Report.Owed != want {
		t.Errorf("report owes %d events, want %d (%d pending, one delivered by the search consumer)", ce.Report.Owed, want, pending)
	}
	if s := ce.Report.String(); !strings.Contains(s, "had not delivered") {
		t.Errorf("report does not say what the live index lacked:\n%s", s)
	}
	if st, _, _ := b.jobState(b.alias); st != "failed" {
		t.Errorf("job state %q, want failed", st)
	}
}

// liveWithPending builds the live index from 600 delivered events, then
// writes n more that no relay delivers; it returns the live definition and
// how many customer events are pending.
func (b *bundle) liveWithPending(n int) (*mapping.Def, int64) {
	b.t.Helper()
	b.write(600)
	b.dispatchAll()
	def := b.def(nil)
	b.buildLive(def)
	b.write(n)
	return def, b.pendingCustomerEvents()
}

// pendingCustomerEvents counts the pending events the customer projection
// matches.
func (b *bundle) pendingCustomerEvents() int64 {
	b.t.Helper()
	var n int64
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM aa_outbox_event WHERE status = 'pending' AND event_type LIKE 'entity.customer.%' AND aggregate_type = 'DDM_ENTITY'`).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}
