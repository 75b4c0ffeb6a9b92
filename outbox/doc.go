// Package outbox is what a producer imports: the event type of the outbox
// table (mdm.aa_outbox_event) and its statuses, the Writer that writes events
// inside the caller's transaction, and the few schema-level facts the relay
// shares with producers (the NOTIFY Channel, HeldSQL). The operator's reads
// and changes (`searchsync outbox …`, the console's actions) are package
// outbox/outboxadmin, beside it.
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
// # Snapshot events
//
// A service that writes the whole state of aggregates it already has (a
// backfill of its own; searchsync's is `searchsync backfill`) calls
// Writer.Lock before it reads their rows and Writer.Write after, in one
// transaction, with event types ending in ".snapshot" (docs/backfill.md).
package outbox
