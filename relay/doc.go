// Package relay owns delivery: the loop behind `searchsync run` that claims
// pending outbox events, hands them to the routed consumers (sink.Consumer)
// and writes every outcome back, with ordered at-least-once semantics across
// any number of relay instances sharing one database.
//
// # Partitions and leases
//
// Aggregates are spread over Config.Partitions partitions by
//
//	abs(hashtextextended(aggregate_type || '/' || aggregate_id::text, 0) % partitions)
//
// (the key the producer's advisory lock hashes); events without an
// aggregate_id go to partition id % partitions. Every partition has one owner
// at a time, recorded in aa_relay_lease (owner, epoch, expires_at). Every
// instance heartbeats its row in aa_relay_instance each LeaseTTL/3, renews its
// leases, takes free or expired partitions up to its fair share
// ceil(partitions / live instances) and hands back partitions above its share
// (after the batch in flight) so that a joining instance gets work. A killed
// instance stops renewing; its leases expire after LeaseTTL and the others take
// them over. After an outage of the database longer than LeaseTTL every lease
// and instance row has expired: an instance back from it still counts, for
// one LeaseTTL, as many others as it saw live before (of those whose rows
// remain), so each takes its share at once and nothing is handed back; a
// heartbeat that fails is tried again every PollInterval. No operator action
// is needed in any of these cases.
//
// # Fencing
//
// Taking a lease increments its epoch. The ack statement locks the acker's
// lease rows FOR SHARE and updates only events whose partition is still held
// by the acker with the epoch it claimed under and an unexpired lease, so an
// instance that lost a partition (paused, cut off) can never record an outcome
// for it; its events are delivered again by the new owner (at-least-once).
//
// Deliveries are fenced as well (fence.go): every batch's context carries a
// delivery.Lease. Until the local deadline (start of the last successful renewal
// + LeaseTTL - LeaseTTL/5, monotonic clock) and while every partition of the
// batch is still held with its claimed epoch, Check is nil; consumers call it
// before every request, and the relay cancels the context (cause
// delivery.ErrLeaseExpired) when the deadline passes, cutting requests in flight.
// Token gives the (partition, epoch) fencing token receivers get as headers.
//
// # Claiming
//
// A claim is one statement, without row locks (the lease makes the partition
// exclusive): pending events with available_at <= now() in owned partitions,
// in id order, minus every event behind a blocker of its aggregate (an earlier
// failed event, or an earlier pending one whose available_at lies in the
// future). Any other undelivered event before an event of its aggregate is
// pending and available with a smaller id in the same partition, so it comes
// first in the same scan: a batch holds, per aggregate, an unbroken run from
// the head, in id order, so consumers can coalesce it. Blocking is per
// aggregate only: every other aggregate flows on. Two partial indexes
// (migration 00003) keep the claim's cost to what is pending and blocked,
// never the delivered history. A claim runs with sorting disabled for its
// transaction, so that statistics older than a burst cannot make PostgreSQL
// read and sort every pending row instead of walking ix_outbox_event_claimable.
//
// # Pipelining
//
// While claims come back full, up to Config.InFlight batches are delivered at
// once, the next batch is claimed beside them, and each batch is acked as its
// delivery ends (acks side by side), beside the deliveries; so the database's
// and the consumers' work overlap. Without a backlog (the last claim came
// back short) the relay claims as soon as a NOTIFY says events came and fewer
// than Config.InFlight batches are being delivered, beside the batches in
// flight, and claims again after every ack (the next events of that batch's
// aggregates may be claimable now): an event waits for no batch but one that
// holds its aggregate. A claim made while batches are unacked leaves out
// every aggregate of those batches that is still being delivered or has an
// outcome to wait for (by aggregate id; their events stay pending until the
// ack commits, and their next events must wait for its outcomes) and looks
// at the first 4 × its batch size pending events only, so that a backlog
// held by a few hot aggregates is not read whole to find nothing; for every
// other aggregate no unacked outcome can change what is deliverable, so such
// a claim is as correct as one made after the acks.
//
// An aggregate whose events in a delivered batch all went to every routed
// consumer (dispatched or skipped, nothing else to write) is passed: the
// claim leaves out only those events (by id), so its next events are claimed
// and delivered while that batch's ack runs. With a backlog the relay claims
// as soon as the deliveries end (not after the acks), and without one it
// also claims when a delivery ends; so a few hot aggregates no longer wait
// for every ack. The order is the one a single batch holding
// both runs would give: the next events go out after the earlier ones were
// delivered, and after a crash the next owner delivers the run again from
// its first unacked event. The ack of a batch that passed others starts only
// after theirs returned, and is abandoned (its events delivered again) unless
// they recorded every outcome, so a later event is never recorded dispatched
// while an earlier one of its aggregate stays pending.
//
// Per aggregate nothing changes: events in id order, never in two
// deliveries at once. Consumers get concurrent Deliver calls, for different
// aggregates. A short claim beside deliveries is not taken for a drained
// outbox (the next claim, after the acks, is a full one), and after one that
// found little the relay claims after the deliveries for a few batches.
//
// # Batch size
//
// The first claim takes Config.BatchSize events; each claim that comes back
// full doubles the next one's size, up to Config.MaxBatchSize, and a claim
// without exclusions that finds less than half of its size goes back to
// BatchSize (Relay.adapt). A steady load the relay keeps up with gets small
// batches; a backlog gets large ones, which fold more updates of one
// aggregate into one write and cost fewer round trips per event. Each size
// has its own claim statements, with the size as a literal.
//
// # Outcomes, per consumer
//
// Each event goes to every consumer with a route that matches it (consumers run
// concurrently); an event no route wants is skipped. Consumers are
// independent (docs/consumers.md): the claim returns, with each event, its
// delivery rows (aa_outbox_delivery, only for events whose consumers
// diverged) and the consumers an earlier event of its aggregate blocks, and
// the relay hands the event only to the consumers that may have it now. Per
// consumer: OK or Stale is done; a Retry adds one attempt, records
// "<consumer>: <reason>" and moves the next try by exponential backoff with
// jitter and a cap; Poison, or the last allowed attempt, parks it (failed); a
// consumer that panics counts as a Retry. While every routed consumer ends in
// the same state the outbox row alone records it, as with one consumer;
// otherwise each gets a delivery row and the outbox row summarises them
// (dispatched when all have it, failed when one parked it and none still owes
// it, pending otherwise). All outcomes of a batch are written by one statement
// (an UPDATE … FROM unnest(…) with the delivery rows in data-modifying CTEs;
// a leaner one without them when every outcome is dispatched, without an
// error or delivery rows), which applies only to rows still pending with the
// attempts they were claimed with.
//
// # Outages pause a consumer
//
// An Unavailable answer from a consumer that delivered nothing else in its
// batch pauses that consumer (consumers.go): the state lives in
// aa_outbox_consumer, so every relay stops giving it events (each reads the
// table every second); the events' attempts do not move. Probes follow
// Config.Pause: Probe for a sink.Prober, the next batch for the others. The
// first success resumes it everywhere and NOTIFYs the relays. A batch is
// never handed to a consumer that was held when it was claimed: the claim
// left out the events only that consumer still owed, so a later event of an
// aggregate may be in the batch without its predecessor.
//
// # Producers that skip the aggregate lock
//
// Claims deliver in id order what is visible; a producer that inserts
// without the aggregate's advisory lock can commit an earlier id after a
// later one was delivered. With Config.Watermark on (the default), a claim
// takes events of an aggregate only up to the visibility watermark: the
// highest id no transaction can still commit below (watermark.go samples
// pg_current_snapshot() for it). Whatever the setting, the claim looks up,
// for events below the highest id claimed from their partition, whether
// the aggregate's next event was delivered already, and the relay reports
// every event found out of order (order.go): a WARN, Stats.Overtaken and a
// row of aa_outbox_overtaken. docs/ordering.md has the reasoning.
//
// # Waking up
//
// The relay LISTENs on outbox.Channel(schema) and also polls every
// PollInterval; while claims come back full it loops without waiting. A lost
// database connection is waited out with backoff; nothing is ever marked
// failed because the database or a lease was unavailable.
package relay
