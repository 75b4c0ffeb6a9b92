// Package nats owns the queue consumer: it publishes every routed outbox
// event to a NATS JetStream stream and reports one delivery.Outcome per event.
//
// # Messages
//
// The subject comes from the template in Config.Subject (default
// "outbox.{aggregate_type}.{event_type}"); see Subject for how placeholders
// expand and are sanitized. The body is sink.Body(e), the same JSON as the
// webhook consumer's. Headers: Nats-Msg-Id and Outbox-Event-Id (the event
// id), Outbox-Event-Type, Outbox-Schema-Version, Outbox-Aggregate-Type,
// Outbox-Aggregate-Id, Outbox-Tenant-Id, Outbox-Correlation-Id (the last
// three only when set), Outbox-Created-At (RFC 3339) and Content-Type.
//
// # Acknowledgements and outcomes
//
// Every publish waits for its PubAck (async publishes, at most
// nats.max_in_flight outstanding per batch, all awaited). A PubAck — also one
// that says the stream dropped a duplicate — is OK. A rejection is Poison
// with the server's reason: a 4xx JetStream API error (message larger than
// the stream's max_msg_size, subject held by another stream) or a message
// larger than the server's max_payload.
//
// Everything about the server or the stream rather than the message is
// delivery.Unavailable, and the relay pauses the consumer without moving the
// events' attempts: not connected (the server down or restarting; publishes
// are not buffered while disconnected), no PubAck within nats.timeout, a 5xx
// API error, a server without JetStream, and a stream that no longer covers
// the subject. After the first Unavailable outcome of a Deliver call, the
// events not published yet are not published, so an outage costs one
// timeout per batch; they are NotAttempted with the failure as the reason
// ("not published: ..."), so that their attempts cannot move when the relay
// counts the batch's Unavailable events as retries (it does when other
// events of the batch were delivered). While paused the relay calls Probe:
// connected, JetStream account info, and stream info of nats.stream.
//
// "No responders" needs care: it says that nothing listens on the subject,
// which is the case when no stream covers it, but also, for a moment, when
// the stream exists and is unavailable (a leader election in a cluster, a
// restart), and when the server has no JetStream. The consumer then asks the
// server which stream holds the subject: a stream other than nats.stream is
// Poison; none ("no stream covers subject ...", with how the stream comes
// back), no answer or no JetStream is Unavailable. Since the start-up check
// guarantees that the stream covers every subject of the template, "no
// stream covers" means the stream was changed or deleted after start-up:
// once an operator recreates it (or restarts searchsync with
// nats.create_stream) the probe succeeds and the backlog moves.
//
// # Fencing
//
// Before every publish the relay's lease is checked (delivery.CheckLease);
// once its deadline has passed nothing more is published and the events are
// NotAttempted ("lease deadline passed"). Every message carries the fencing
// token of its event's partition in the headers Searchsync-Partition and
// Searchsync-Lease-Epoch (sink.HeaderPartition, sink.HeaderLeaseEpoch):
// a subscriber keeps the highest epoch seen per partition and drops a
// message with a lower one (docs/consumers.md).
//
// # Order per aggregate
//
// Within a batch the next event of an aggregate is published only after the
// previous one was acknowledged, and an aggregate stops at its first failure
// (later events NotAttempted); aggregates are published concurrently. The
// relay hands an aggregate's next event only after the previous one was
// delivered, so the stream holds every aggregate's events in id order. A
// subscriber keeps that order either by
//
//   - one subject per aggregate: put {aggregate_id} in the template
//     ("outbox.{aggregate_type}.{aggregate_id}.{event_type}") and read an
//     aggregate's subject ("outbox.DDM_ENTITY.<id>.>") with an ordered
//     consumer, or with a durable consumer with max_ack_pending: 1 per
//     filter subject, or
//   - one durable consumer with max_ack_pending: 1 over the whole stream
//     (global order, which includes per-aggregate order, at the cost of
//     throughput), or
//   - several consumers each filtering a disjoint subject subset, each with
//     max_ack_pending: 1.
//
// A consumer with max_ack_pending > 1 and redelivery (AckWait) can process an
// aggregate's events out of order: a message redelivered after AckWait
// arrives after its successors.
//
// # De-duplication and the duplicate window
//
// Nats-Msg-Id is the event id, so the stream drops a message whose id it
// stored within its duplicate window (nats.duplicate_window, default 2m;
// the configuration requires at least 2 × relay.lease_ttl). Redeliveries
// come from two places:
//
//   - a relay crash between publish and ack: the partition's next owner
//     delivers again after the lease expires (≤ relay.lease_ttl), well inside
//     the window;
//   - a retry after a PubAck was lost (the message may have been stored):
//     the redelivery comes after relay.backoff (initial 1s, doubling, capped
//     at relay.backoff.max, default 10m), or after a pause of the consumer
//     once the probe succeeds. Consumers are independent (docs/consumers.md):
//     a failure or outage of another consumer of the same event does not
//     send it to the queue again.
//
// A redelivery later than the window — a long outage of NATS itself, a
// backoff beyond the window, an operator retrying failed events days later —
// is stored again. Subscribers must therefore still de-duplicate by
// Nats-Msg-Id (the event id) themselves, e.g. by remembering the highest
// event id applied per aggregate (ids grow per aggregate) or by an
// idempotent upsert keyed by the id. Raise nats.duplicate_window to cover
// relay.backoff.max if fewer duplicates matter more than the memory the
// server spends on the window (one entry per message in the window).
//
// # Stream management
//
// With nats.create_stream the stream is created with subjects
// "<prefix>.>" (the template's literal tokens before its first placeholder),
// nats.retention, nats.duplicate_window and nats.max_age, or an existing one
// is updated (subjects added when not covered, window and max age set;
// retention cannot change in place and a mismatch is an error). Without it
// the stream must exist, cover every subject the template can produce and
// de-duplicate over at least nats.duplicate_window. Any of these problems
// stops start-up with a *ConfigError naming the key.
package nats
