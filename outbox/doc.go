// Package outbox owns the outbox table (mdm.aa_outbox_event): the event type,
// the producer API that writes events inside the caller's transaction, and the
// SQL every other part of searchsync uses to read and update rows.
//
// # Producing events
//
// A service writes its business change and its events in one pgx transaction:
//
//	w, _ := outbox.NewWriter(outbox.WriterConfig{Schema: "mdm"})
//	tx, _ := pool.Begin(ctx)
//	// ... business change ...
//	ids, err := w.Write(ctx, tx, outbox.Event{
//		EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY",
//		AggregateID: &id, Payload: payload,
//	})
//	tx.Commit(ctx)
//
// Write validates every event first (nothing is written when one is invalid),
// then, in one round trip, takes a transaction-scoped advisory lock per
// aggregate key, inserts all rows with one INSERT … SELECT FROM unnest(…), and
// queues a NOTIFY that PostgreSQL delivers to the relay at commit.
//
// # Why the advisory lock (commit order = id order per aggregate)
//
// A bigserial id is taken at INSERT, not at COMMIT: two transactions can commit
// out of id order, and a relay that trusts ids alone could deliver event 11
// before event 10 commits. The lock is held until the transaction ends, so a
// second writer of the same aggregate takes its id only after the first one
// committed or rolled back. Producers that insert with plain SQL must do the
// same, in the same transaction, before the INSERT:
//
//	SELECT pg_advisory_xact_lock(hashtextextended('DDM_ENTITY' || '/' || '<aggregate_id>', 0));
//
// Events without an
// aggregate_id take no lock: they have no order to keep.
//
// # Operator actions
//
// Admin holds the operator's reads and changes (`searchsync outbox …` and
// the console's actions run the same methods): Status, List, and the
// changes Retry (failed → pending, attempts 0, due now), Ack (delete failed
// and skipped events, recorded in aa_job) and Skip (failed → skipped: the
// event no longer blocks its aggregate, since only pending and failed
// events do; it keeps its row and last_error as evidence and stays until
// acknowledged; failed delivery rows of a diverged event are marked done,
// not delivered). Skip takes no consumer: one consumer's failed delivery
// marked done is Ack with Filter.Consumer. Every change locks what it
// changes, records an aa_job row naming who acted and wakes the relays; the
// notes are in admin.go.
package outbox
