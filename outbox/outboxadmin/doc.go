// Package outboxadmin owns the operator's reads and changes of the outbox
// (`searchsync outbox …`; the console's actions run the same methods) and
// their SQL: Admin with Status, List, and the changes Retry (failed →
// pending, attempts 0, due now), Ack (delete failed and skipped events,
// recorded in aa_job) and Skip (failed → skipped: the event no longer blocks
// its aggregate, since only pending and failed events do; it keeps its row
// and last_error as evidence and stays until acknowledged; failed delivery
// rows of a diverged event are marked done, not delivered). Skip takes no
// consumer: one consumer's failed delivery marked done is Ack with
// Filter.Consumer. Every change locks what it changes, records an aa_job row
// naming who acted (JobKindAck, JobKindRetry, JobKindSkip) and wakes the
// relays; the notes are in admin.go.
//
// It sits beside package outbox, the producer API, so that a service that
// writes events does not import the operator's code: it builds on outbox
// (the event type, its statuses, the NOTIFY channel) and routing (which
// consumers an event is routed to, for Filter.Consumer and the per-consumer
// views), and on nothing above them.
package outboxadmin
