package relay

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/outbox"
)

// partitionExpr is the partition of event e among {partitions}: the hash of
// the aggregate key (the producer's advisory-lock key), or the id for events
// without an aggregate.
const partitionExpr = `(CASE WHEN e.aggregate_id IS NULL THEN e.id % {partitions}
	ELSE abs(hashtextextended(e.aggregate_type || '/' || e.aggregate_id::text, 0) % {partitions}) END)::int`

// claimSQL reads the next deliverable events: pending, available_at <=
// now(), in the owned partitions ($1; the filter is left out when the relay
// owns every partition), in id order, at most {batch}, without the events
// that sit behind a blocker of their aggregate for every consumer, and
// without the events whose consumers diverged (delivery rows) when none of
// the consumers that still owe them can take them now.
//
// Blockers (docs/consumers.md): an earlier event without delivery rows that
// is failed, or pending with available_at in the future, blocks every
// consumer (blocker); an earlier event whose delivery row for consumer C is
// failed, waits for its own retry or is held for a paused C blocks C only
// (a probe of ix_outbox_delivery_open per event). Each row
// carries its own delivery rows (consumers, states, attempts, ms until
// available) and the consumers blocked before it, so that the relay hands it
// only to the consumers that may have it.
//
// Why that is exactly "deliverable": every other undelivered event before an
// event of the same aggregate is pending and available, so it has a smaller
// id in the same partition and comes first in the same scan; the LIMIT can
// cut an aggregate's run short but never leave a hole in it. (Commit order is
// id order per aggregate, so an event is never visible before the ones
// before it.) A batch may therefore hold several consecutive events of one
// aggregate, for coalescing.
//
// The candidates come from ix_outbox_event_claimable in id order (events
// held for a paused consumer are not in it); the
// blockers through the small failed index, the tail of the spec's pending
// index and the open delivery rows, so they cost what is blocked. Filtering
// them before the LIMIT keeps a blocked aggregate with a long tail from
// starving the others. With no delivery rows (one consumer, or every
// consumer succeeding at once) the per-consumer parts are probes of an
// empty index.
const claimSQL = blockerCTE + `
SELECT ` + eventColumns + `
FROM {s}.aa_outbox_event e
WHERE e.status = 'pending' AND e.available_at <= now() AND e.available_at < ` + outbox.HeldSQL + `
  {partition_filter}` + belowHorizon + notBlocked + `
ORDER BY e.id
LIMIT {batch}`

// belowHorizon leaves out the events of an aggregate above the visibility
// watermark ({horizon}: the highest id no transaction can still commit
// below; the largest bigint when the watermark is off). Events without an
// aggregate have no order to keep.
const belowHorizon = `
  AND (e.aggregate_id IS NULL OR e.id <= {horizon}::bigint)`

const blockerCTE = `
WITH blocker AS (
	SELECT aggregate_type, aggregate_id, min(id) AS first_id
	FROM (SELECT aggregate_type, aggregate_id, id FROM {s}.aa_outbox_event
	      WHERE status = 'failed' AND aggregate_id IS NOT NULL
	      UNION ALL
	      SELECT aggregate_type, aggregate_id, id FROM {s}.aa_outbox_event
	      WHERE status = 'pending' AND available_at > now() AND available_at < ` + outbox.HeldSQL + `
	        AND aggregate_id IS NOT NULL
	        -- Not implied by the index predicate, so the planner seeks
	        -- ix_outbox_event_pending to (pending, now()) instead of reading it
	        -- whole (PostgreSQL drops status = 'pending' as redundant).
	        AND status >= (SELECT 'pending'::{s}.outbox_status)) b
	WHERE NOT EXISTS (SELECT 1 FROM {s}.aa_outbox_delivery d WHERE d.event_id = b.id)
	GROUP BY aggregate_type, aggregate_id
)`

// anyDelivery is true when any event has delivery rows (evaluated once per
// claim): without any, the per-event look-ups below are skipped altogether,
// so the claim costs what it cost before consumers could diverge.
const anyDelivery = `(SELECT EXISTS (SELECT 1 FROM {s}.aa_outbox_delivery))`

const notBlocked = `
  AND NOT EXISTS (SELECT 1 FROM blocker b
                  WHERE b.aggregate_type = e.aggregate_type AND b.aggregate_id = e.aggregate_id
                    AND b.first_id < e.id)
  AND (NOT ` + anyDelivery + `
       -- (OFFSET 0: a probe per event, never a hash of the whole table)
       OR NOT EXISTS (SELECT 1 FROM {s}.aa_outbox_delivery y WHERE y.event_id = e.id OFFSET 0)
       OR EXISTS (
        SELECT 1 FROM {s}.aa_outbox_delivery x
        WHERE x.event_id = e.id AND x.state = 'pending' AND x.available_at <= now()
          AND x.consumer <> ALL({paused}::text[])
          -- not blocked for that consumer by an earlier event of the
          -- aggregate: its row failed or not available yet (its own retry,
          -- or held for a paused consumer); one probe of
          -- ix_outbox_delivery_open
          AND NOT EXISTS (SELECT 1 FROM {s}.aa_outbox_delivery cb
              WHERE cb.aggregate_type = e.aggregate_type AND cb.aggregate_id = e.aggregate_id
                AND cb.event_id < e.id AND cb.state <> 'done' AND cb.consumer = x.consumer
                AND (cb.state = 'failed' OR cb.available_at > now()` + heldBack + `))))`

// heldBack extends "an earlier open row cb of the consumer blocks it" to a
// row that is available while its outbox row is not (held, or waiting):
// that event is claimed by no one now, so nothing later of its aggregate
// may overtake it for the consumer. The outbox row is available when its
// first pending consumer is, so this holds only in a state no statement
// should leave (an outbox row held after a resume released the row that
// held it, which the orphan sweep repairs); without it, the aggregate's
// next events would reach that consumer before this one.
const heldBack = `
                     OR EXISTS (SELECT 1 FROM {s}.aa_outbox_event hb WHERE hb.id = cb.event_id AND hb.available_at > now())`

// claimBehindSQL is the claim made while batches are still unacked (being
// delivered, or their ack in flight). It leaves them out: every event of
// their aggregates (aggregate ids {p1}), and by id ({p2}) their events
// without an aggregate and those of the aggregates it passes (Relay.unacked:
// delivered to every consumer, so the aggregate's next events may follow);
// they stay pending until the ack commits, and the next events of every
// other aggregate of theirs must wait for its outcomes. Matching the aggregate
// id alone may hold back an aggregate of another type with the same id for
// one batch, which costs nothing. Both are NOT IN over an unnest of the
// array: an uncorrelated subquery, which PostgreSQL hashes once per claim
// ("hashed SubPlan") in the prepared statement's generic plan too, so that
// the claim is not planned anew every time (about 1 ms of the server's CPU
// per claim). A <> ALL over the array is hashed only in a custom plan (the
// array a constant), and an anti-join on an unnest of (type, id) pairs was
// planned as a nested loop. (The arrays hold no NULL, so NOT IN means "not
// one of them".)
//
// It looks at the first {window} pending events only: when a few aggregates
// hold most of the backlog, every candidate may sit behind the batches in
// flight, and an unbounded claim would read the whole backlog to return
// nothing. A short claim is not taken for an empty outbox: the next claim,
// after the acks, is a full one.
const claimBehindSQL = blockerCTE + `
SELECT ` + eventColumns + `
FROM (SELECT * FROM {s}.aa_outbox_event e
      WHERE e.status = 'pending' AND e.available_at <= now() AND e.available_at < ` + outbox.HeldSQL + `
        {partition_filter}` + belowHorizon + `
      ORDER BY e.id
      LIMIT {window}) e
WHERE (e.aggregate_id IS NULL OR e.aggregate_id NOT IN (SELECT unnest({p1}::uuid[])))
  AND e.id NOT IN (SELECT unnest({p2}::bigint[]))` + notBlocked + `
ORDER BY e.id
LIMIT {batch}`

// eventColumns is what a claim reads of an event, its partition first, its
// delivery rows (a JSON array of [consumer, state, attempts, ms until
// available], NULL when it has none), blocked consumers and the event that
// overtook it last.
//
// overtaken is the id of the aggregate's next event when that one was
// already delivered (dispatched, or failed after its attempts), 0 when it is
// pending, NULL when there is none or it was not looked up: an event
// committed after a later event of its aggregate was delivered (a producer
// that skipped the aggregate lock). The relay also counts the events of
// the aggregate claimed before such an event (Relay.overtaken).
//
// The look-up (one probe of ix_outbox_event_aggregate and a heap fetch,
// about 6 µs of the server's CPU) runs only for events below {probe}'s
// entry for their partition, the highest id claimed from it (leases.probe):
// an event above every id claimed from its partition has no later event
// that was delivered. Most events of a steady flow or a backlog drained in
// id order are above it; events an earlier claim left out (their aggregate
// was in flight), retries, and events that come late are below it.
const eventColumns = partitionExpr + ` AS part,
       e.id, e.tenant_id, e.event_type, e.schema_version, e.aggregate_type, e.aggregate_id,
       e.audit_log_id, e.correlation_id, e.payload, e.attempts, e.last_error,
       e.available_at, e.created_at, e.created_by,
       CASE WHEN ` + anyDelivery + ` THEN (
           SELECT json_agg(json_build_array(d.consumer, d.state, d.attempts,
                                            (extract(epoch FROM d.available_at - now()) * 1000)::bigint,
                                            d.available_at = ` + outbox.HeldSQL + `))
           FROM {s}.aa_outbox_delivery d WHERE d.event_id = e.id) END AS deliveries,
       CASE WHEN ` + anyDelivery + ` AND e.aggregate_id IS NOT NULL THEN ARRAY(
           SELECT c FROM unnest({consumers}::text[]) c
           WHERE EXISTS (SELECT 1 FROM {s}.aa_outbox_delivery cb
               WHERE cb.aggregate_type = e.aggregate_type AND cb.aggregate_id = e.aggregate_id AND cb.consumer = c
                 AND cb.event_id < e.id AND cb.state <> 'done' AND (cb.state = 'failed' OR cb.available_at > now()` + heldBack + `))) END AS blocked,
       CASE WHEN e.aggregate_id IS NOT NULL AND e.id < ({probe}::bigint[])[` + partitionExpr + ` + 1] THEN (
           SELECT CASE WHEN n.status IN ('dispatched', 'failed') THEN n.id ELSE 0 END
           FROM {s}.aa_outbox_event n
           WHERE n.aggregate_type = e.aggregate_type AND n.aggregate_id = e.aggregate_id AND n.id > e.id
           ORDER BY n.aggregate_type, n.aggregate_id, n.id LIMIT 1) END AS overtaken`

// ackSQL writes every outcome of a batch. It locks the acker's lease rows
// FOR SHARE (a takeover waits until the ack is committed) and touches only
// events whose partition the acker ($1) still holds with the epoch it claimed
// under ($2/$3 partitions/epochs) and that are still pending with the
// attempts they were claimed with (so applying an ack twice changes nothing).
//
// Per event ($4…$10): the outbox row's new status (retry and pending both
// mean pending, available after delay_ms), attempts and last_error (empty:
// kept). Per (event, consumer) ($11…$16): the delivery rows to write, only
// for events whose consumers went different ways; they are written only for
// events whose outbox row was updated, and the rows of events dispatched now
// ($17: the ids that had rows) are deleted.
const ackSQL = ackLeaseCTE + `
o AS (
	SELECT * FROM unnest($4::bigint[], $5::int[], $6::int[], $7::text[], $8::text[], $9::bigint[], $10::int[])
	         AS o(id, part, attempts, outcome, last_error, delay_ms, new_attempts)
	WHERE o.part IN (SELECT partition FROM lease)
),
upd AS (
	UPDATE {s}.aa_outbox_event e SET
		status = (CASE WHEN o.outcome IN ('retry', 'pending') THEN 'pending' ELSE o.outcome END)::{s}.outbox_status,
		attempts = o.new_attempts,
		last_error = CASE WHEN o.last_error <> '' THEN o.last_error ELSE e.last_error END,
		available_at = CASE WHEN o.outcome IN ('retry', 'pending') THEN
			CASE WHEN o.delay_ms < 0 THEN ` + outbox.HeldSQL + ` ELSE now() + o.delay_ms * interval '1 millisecond' END
			ELSE e.available_at END,
		dispatched_at = CASE WHEN o.outcome = 'dispatched' THEN now() ELSE e.dispatched_at END
	FROM o
	WHERE e.id = o.id AND e.status = 'pending' AND e.attempts = o.attempts
	RETURNING e.id, o.outcome, e.aggregate_type, e.aggregate_id
),
ins AS (
	INSERT INTO {s}.aa_outbox_delivery AS t
		(event_id, consumer, aggregate_type, aggregate_id, state, attempts, last_error, available_at, delivered_at, updated_at)
	SELECT d.id, d.consumer, u.aggregate_type, u.aggregate_id, d.state, d.attempts, nullif(d.last_error, ''),
	       CASE WHEN d.delay_ms < 0 THEN ` + outbox.HeldSQL + ` ELSE now() + d.delay_ms * interval '1 millisecond' END,
	       CASE WHEN d.state = 'done' THEN now() END, now()
	FROM unnest($11::bigint[], $12::text[], $13::text[], $14::int[], $15::text[], $16::bigint[])
	         AS d(id, consumer, state, attempts, last_error, delay_ms)
	JOIN upd u ON u.id = d.id AND u.outcome NOT IN ('dispatched', 'skipped')
	ON CONFLICT (event_id, consumer) DO UPDATE SET
		state = excluded.state, attempts = excluded.attempts,
		last_error = coalesce(excluded.last_error, t.last_error),
		available_at = excluded.available_at,
		delivered_at = coalesce(t.delivered_at, excluded.delivered_at), updated_at = now()
),
del AS (
	-- (the ids as an array, not a join with upd: that was planned as a
	-- nested loop over upd per delivery row, rows=1 being its estimate)
	DELETE FROM {s}.aa_outbox_delivery x
	WHERE x.event_id = ANY($17::bigint[])
	  AND x.event_id = ANY(ARRAY(SELECT u.id FROM upd u WHERE u.outcome = 'dispatched'))
),
` + countDeliveredCTE + `
SELECT count(*) FROM upd`

// countDeliveredCTE adds what an ack's statement changed to
// aa_consumer_throughput, in the same statement (so a retried ack counts
// nothing twice and a fenced one nothing at all): per consumer the (event,
// consumer) pairs ($18/$19) whose event the statement updated (upd), and as
// consumer '*' the events it dispatched or skipped. The row is this
// second's of this connection, so no two statements ever wait for each
// other's row lock; the lag reader sums them. (ackHeldSQL counts per
// consumer instead of per pair: about 1 µs of PostgreSQL's CPU less per
// event.)
const countDeliveredCTE = `counted AS (
	INSERT INTO {s}.aa_consumer_throughput AS t (second, consumer, backend, events)
	SELECT date_trunc('second', now()), c.consumer, pg_backend_pid(), count(*)
	FROM (SELECT d.consumer FROM unnest($18::bigint[], $19::text[]) AS d(id, consumer)
	      WHERE d.id IN (SELECT u.id FROM upd u)
	      UNION ALL
	      SELECT '*' FROM upd u WHERE u.outcome IN ('dispatched', 'skipped')) c
	GROUP BY c.consumer
	ON CONFLICT (second, consumer, backend) DO UPDATE SET events = t.events + excluded.events
)`

// ackLeaseCTE locks the acker's lease rows FOR SHARE ($1 owner, $2/$3 the
// partitions and epochs it claimed under): both acks write only where it
// still holds them.
const ackLeaseCTE = `
WITH lease AS (
	SELECT l.partition FROM {s}.aa_relay_lease l
	WHERE l.owner = $1 AND l.expires_at > now()
	  AND (l.partition, l.epoch) IN (SELECT * FROM unnest($2::int[], $3::bigint[]))
	FOR SHARE
),`

// ackHeldSQL is ackSQL for the common batch (every outcome dispatched,
// without an error to record, and no event had delivery rows) while the
// acker still holds every partition it claimed under ($1…$3 as for ackSQL;
// $4 the ids): the ids alone pick the rows, as the bare UPDATE of a SKIP
// LOCKED loop does, when every lease row is still there; else it changes
// nothing and the relay falls back to ackSQL, which fences partition by
// partition. Joining every row with its partition and claimed attempts
// (the unnest of arrays a lean form of ackSQL did) cost PostgreSQL about
// 1.5 µs per event more than the bare UPDATE (a scratch comparison over
// 20,000 rows: 171–187 ms against 139–150 ms). The claimed attempts need
// no check here: a dispatched outcome leaves them as claimed, and a row
// acked before is no longer pending. It returns the count of updated rows.
const ackHeldSQL = ackLeaseCTE + `
held AS (SELECT count(*) AS n FROM lease),
upd AS (
	UPDATE {s}.aa_outbox_event e SET status = 'dispatched', dispatched_at = now()
	WHERE e.id = ANY($4::bigint[]) AND e.status = 'pending'
	  AND (SELECT n FROM held) = cardinality($2::int[])
	RETURNING 1
),
n AS (SELECT count(*) AS n FROM upd),
counted AS (
	-- Every event delivered to every consumer it is routed to: $5/$6 the
	-- events per consumer, counted when every id was updated (else the
	-- rows acked before were counted then; see countDeliveredCTE).
	INSERT INTO {s}.aa_consumer_throughput AS t (second, consumer, backend, events)
	SELECT date_trunc('second', now()), c.consumer, pg_backend_pid(), c.events
	FROM (SELECT * FROM unnest($5::text[], $6::bigint[]) AS c(consumer, events)
	      WHERE (SELECT n FROM n) = cardinality($4::bigint[])
	      UNION ALL
	      SELECT '*', n FROM n) c
	WHERE c.events > 0
	ON CONFLICT (second, consumer, backend) DO UPDATE SET events = t.events + excluded.events
)
SELECT n FROM n`

// Consumer pause statements ($1 is always the consumer).
const (
	// releaseHeldSQL makes the next $2 events held for consumer $1 (by id)
	// available again, its delivery rows and their outbox rows, and
	// returns how many. Released in id order, a held row always follows
	// the released ones of its aggregate, so it keeps blocking the later
	// events for that consumer (cblocked) until its turn.
	//
	// An outbox row is available when its first pending consumer is, so a
	// freed row makes its outbox row available now: held (only this
	// consumer owed it) or waiting for another consumer's retry alike. The
	// outbox rows are chosen by id and status alone and set from their
	// newest version: b may wait for an ack's lock on a delivery row, and
	// the statement's snapshot is from before that ack committed. An ack
	// that held the outbox row (its other consumers were done, this one
	// still held) left it held in the newest version but available in the
	// snapshot, and "available_at = held" in the WHERE, read in the
	// snapshot, skipped it: the delivery row was freed, the outbox row
	// stayed held for no consumer (TestReleaseAfterAConcurrentAckLeavesNoOrphan).
	// A row that changed is re-read before it is written, so least() and
	// status = 'pending' see what the ack wrote.
	//
	// Each step takes the ids of the one before as an array (= ANY of an
	// ARRAY subquery, one look-up per id through the primary key): a join
	// with the CTE instead was planned as a nested loop over it when the
	// statistics predate the outage (rows=1), which read it once per held
	// row, 4 s for 3,000 rows and quadratic beyond, while the rows stayed
	// locked and acks waited on them.
	releaseHeldSQL = `WITH b AS (
	SELECT event_id FROM {s}.aa_outbox_delivery
	WHERE consumer = $1 AND state = 'pending' AND available_at = ` + outbox.HeldSQL + `
	ORDER BY event_id LIMIT $2 FOR UPDATE),
d AS (
	UPDATE {s}.aa_outbox_delivery x SET available_at = now(), updated_at = now()
	WHERE x.event_id = ANY(ARRAY(SELECT event_id FROM b)) AND x.consumer = $1 RETURNING x.event_id),
o AS (
	UPDATE {s}.aa_outbox_event e
	SET available_at = least(e.available_at, now())
	WHERE e.id = ANY(ARRAY(SELECT event_id FROM d)) AND e.status = 'pending')
SELECT count(*) FROM d`

	// unholdOrphansSQL makes available again the held outbox rows that no
	// held delivery row keeps held: no consumer waits for a resume to get
	// them, so nothing else would ever release them. They came from races
	// that acks and releases no longer lose (a batch acked an event as held
	// for C after another relay's resume of C had released C's row, without
	// writing that row again; a release that read the outbox row with a
	// snapshot from before such an ack, see releaseHeldSQL): the statement
	// is the safety net. At most $1 per statement, skipping rows an ack
	// holds locked.
	//
	// The delivery rows are probed through the primary key: "available_at
	// >= held" means "= held" (nothing is later), but unlike it does not
	// match ix_outbox_delivery_held, which PostgreSQL otherwise picked with
	// statistics that predate the outage, scanning the whole held index
	// once per held row (2.3 s for 3,000 rows, quadratic beyond).
	unholdOrphansSQL = `UPDATE {s}.aa_outbox_event e SET available_at = now()
WHERE e.id = ANY(ARRAY(
	SELECT x.id FROM {s}.aa_outbox_event x
	WHERE x.status = 'pending' AND x.available_at = ` + outbox.HeldSQL + `
	  AND NOT EXISTS (SELECT 1 FROM {s}.aa_outbox_delivery d
	                  WHERE d.event_id = x.id AND d.state = 'pending' AND d.available_at >= ` + outbox.HeldSQL + `)
	ORDER BY x.id LIMIT $1 FOR UPDATE SKIP LOCKED))`

	// pauseSQL marks a consumer paused (keeping the first paused_at) and
	// schedules its next probe: $3 ms after the first pause, twice as late
	// after every failed probe, at most $4 ms, and never before the $6 ms the
	// consumer's remote end asked for (a Retry-After).
	pauseSQL = `INSERT INTO {s}.aa_outbox_consumer AS c (consumer, state, paused_at, reason, probes, probe_at, instance, updated_at)
VALUES ($1, 'paused', now(), $2, 0, now() + greatest($3::bigint, $6::bigint) * interval '1 millisecond', $5, now())
ON CONFLICT (consumer) DO UPDATE SET
	paused_at = CASE WHEN c.state = 'paused' THEN c.paused_at ELSE now() END,
	probes = CASE WHEN c.state = 'paused' THEN c.probes + 1 ELSE 0 END,
	probe_at = now() + greatest($6::float8, least($4::float8, $3::float8 * power(2::float8,
		least(CASE WHEN c.state = 'paused' THEN c.probes + 1 ELSE 0 END, 30))))::bigint * interval '1 millisecond',
	state = 'paused', reason = $2, instance = $5, updated_at = now()`

	// resumeSQL sets a paused consumer running and wakes every relay.
	resumeSQL = `WITH r AS (
	UPDATE {s}.aa_outbox_consumer SET state = 'running', probes = 0, probe_at = NULL, instance = $2, updated_at = now()
	WHERE consumer = $1 AND state = 'paused' RETURNING 1)
SELECT pg_notify($3, '') FROM r`

	// consumerStatesSQL reads every consumer's pause state, probe_at as ms
	// from now (the database's clock).
	consumerStatesSQL = `SELECT consumer, state = 'paused', coalesce((extract(epoch FROM probe_at - now()) * 1000)::bigint, 0), coalesce(reason, '')
FROM {s}.aa_outbox_consumer`
)

// Lease and membership statements. $1 is always the instance id.
const (
	// ensurePartitionsSQL creates the missing lease rows. In a new table
	// their claimed_max is 0 (nothing was ever claimed); when rows are
	// added to existing ones the partition count grew, every aggregate may
	// have moved, and no claimed_max holds any more (NULL).
	ensurePartitionsSQL = `WITH had AS (SELECT count(*) AS n FROM {s}.aa_relay_lease),
ins AS (
	INSERT INTO {s}.aa_relay_lease (partition, claimed_max)
	SELECT g, CASE WHEN (SELECT n FROM had) = 0 THEN 0 END FROM generate_series(0, $1::int - 1) g
	ON CONFLICT DO NOTHING RETURNING 1)
UPDATE {s}.aa_relay_lease SET claimed_max = NULL WHERE (SELECT n FROM had) > 0 AND EXISTS (SELECT 1 FROM ins)`

	otherPartitionCountSQL = `SELECT id, partitions FROM {s}.aa_relay_instance
WHERE expires_at > now() AND partitions <> $1 AND id <> $2 LIMIT 1`

	// trimPartitionsSQL drops the lease rows above the partition count; the
	// others' claimed_max no longer holds then (see ensurePartitionsSQL).
	trimPartitionsSQL = `WITH del AS (
	DELETE FROM {s}.aa_relay_lease WHERE partition >= $1 AND (owner IS NULL OR expires_at <= now()) RETURNING 1)
UPDATE {s}.aa_relay_lease SET claimed_max = NULL WHERE EXISTS (SELECT 1 FROM del)`

	// heartbeatSQL renews the instance row and returns the other live
	// instances, and those of $6 whose row is still there, expired or not
	// (see leases.settleUntil).
	heartbeatSQL = `INSERT INTO {s}.aa_relay_instance AS i (id, hostname, pid, partitions, expires_at)
VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 millisecond')
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), expires_at = excluded.expires_at
RETURNING ARRAY(SELECT id FROM {s}.aa_relay_instance WHERE id <> $1 AND expires_at > now() ORDER BY id),
          ARRAY(SELECT id FROM {s}.aa_relay_instance WHERE id <> $1 AND id = ANY($6::text[]) ORDER BY id)`

	// forgetDeadSQL deletes the rows of instances dead for longer than $1
	// ms, except those of $2 (still awaited back after an outage).
	forgetDeadSQL = `DELETE FROM {s}.aa_relay_instance WHERE expires_at < now() - $1::bigint * interval '1 millisecond' AND id <> ALL(coalesce($2::text[], '{}'))`

	renewSQL = `UPDATE {s}.aa_relay_lease l SET expires_at = now() + $4::bigint * interval '1 millisecond'
FROM unnest($2::int[], $3::bigint[]) AS h(partition, epoch)
WHERE l.partition = h.partition AND l.epoch = h.epoch AND l.owner = $1
RETURNING l.partition, l.epoch`

	// acquireSQL takes free or expired leases and returns, per partition,
	// where the new owner's out-of-order look-ups start (see
	// leases.probeFrom): the claimed_max a clean release left, else one
	// past the outbox sequence's last value. Owned, claimed_max is NULL.
	acquireSQL = `UPDATE {s}.aa_relay_lease l
SET owner = $1, epoch = l.epoch + 1, expires_at = now() + $4::bigint * interval '1 millisecond', acquired_at = now(),
    claimed_max = NULL
FROM (SELECT partition, claimed_max FROM {s}.aa_relay_lease
      WHERE partition < $3 AND (owner IS NULL OR expires_at <= now())
      ORDER BY partition LIMIT $2 FOR UPDATE SKIP LOCKED) f
WHERE l.partition = f.partition
RETURNING l.partition, l.epoch,
          coalesce(f.claimed_max, (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {s}.aa_outbox_event_id_seq) + 1)`

	// releaseSQL hands back partitions $2 with the highest ids claimed
	// from each ($3).
	releaseSQL = `UPDATE {s}.aa_relay_lease l SET owner = NULL, expires_at = '-infinity', claimed_max = m.claimed_max
FROM unnest($2::int[], $3::bigint[]) AS m(partition, claimed_max)
WHERE l.owner = $1 AND l.partition = m.partition`

	// releaseAllSQL hands back every lease the instance owns in the
	// database, including one an acquisition took whose answer never
	// reached it (its context was cancelled by the stop mid-query: its
	// claimed_max stays NULL, unknown), with the highest ids claimed ($2,
	// $3) from the partitions it knows of.
	releaseAllSQL = `UPDATE {s}.aa_relay_lease l SET owner = NULL, expires_at = '-infinity',
    claimed_max = (SELECT m.claimed_max FROM unnest($2::int[], $3::bigint[]) AS m(partition, claimed_max) WHERE m.partition = l.partition)
WHERE l.owner = $1`

	leaveSQL = `DELETE FROM {s}.aa_relay_instance WHERE id = $1`
)

// queries holds the statements with the schema filled in.
type queries struct {
	// claims are the claim statements by batch size, smallest first
	// (Config.BatchSize, doubling up to Config.MaxBatchSize).
	claims                                                []claimSet
	ack, ackHeld                                          string
	ensurePartitions, otherPartitionCount, trimPartitions string
	heartbeat, forgetDead, renew, acquire, release, leave string
	releaseAll                                            string
	pause, resume, consumerStates, releaseHeld            string
	unholdOrphans                                         string
	sampleSnapshot, outboxWriters, recordOvertaken        string
}

// claimSet is the claim statements of one batch size.
type claimSet struct {
	size                               int
	all, owned, allBehind, ownedBehind string
}

// batchSizes are the sizes a claim takes: batch, doubling while below
// maxBatch, and maxBatch.
func batchSizes(batch, maxBatch int) []int {
	sizes := []int{batch}
	for n := 2 * batch; n < maxBatch; n *= 2 {
		sizes = append(sizes, n)
	}
	if maxBatch > batch {
		sizes = append(sizes, maxBatch)
	}
	return sizes
}

// newQueries fills in the schema, and the partition count and batch sizes
// as literals: the claims run their generic plans (claimBatch), which are
// planned for these values rather than for unknown ones.
func newQueries(schema string, partitions, batch, maxBatch int) queries {
	r := strings.NewReplacer("{s}", pgx.Identifier{schema}.Sanitize(), "{partitions}", strconv.Itoa(partitions))
	q := queries{
		ack:                 r.Replace(ackSQL),
		ackHeld:             r.Replace(ackHeldSQL),
		ensurePartitions:    r.Replace(ensurePartitionsSQL),
		otherPartitionCount: r.Replace(otherPartitionCountSQL),
		trimPartitions:      r.Replace(trimPartitionsSQL),
		heartbeat:           r.Replace(heartbeatSQL),
		forgetDead:          r.Replace(forgetDeadSQL),
		renew:               r.Replace(renewSQL),
		acquire:             r.Replace(acquireSQL),
		release:             r.Replace(releaseSQL),
		leave:               r.Replace(leaveSQL),
		releaseAll:          r.Replace(releaseAllSQL),
		pause:               r.Replace(pauseSQL),
		resume:              r.Replace(resumeSQL),
		consumerStates:      r.Replace(consumerStatesSQL),
		releaseHeld:         r.Replace(releaseHeldSQL),
		unholdOrphans:       r.Replace(unholdOrphansSQL),
		sampleSnapshot:      r.Replace(sampleSnapshotSQL),
		outboxWriters:       r.Replace(outboxWritersSQL),
		recordOvertaken:     r.Replace(recordOvertakenSQL),
	}
	for _, n := range batchSizes(batch, maxBatch) {
		q.claims = append(q.claims, newClaimSet(r, n))
	}
	return q
}

// newClaimSet fills in the claims of batch size n (r fills in the schema
// and the partition count).
func newClaimSet(r *strings.Replacer, n int) claimSet {
	size := strings.NewReplacer("{batch}", strconv.Itoa(n), "{window}", strconv.Itoa(4*n))
	claim := func(owned, behind bool) string {
		q, first, filter := claimSQL, 1, ""
		if behind {
			q = claimBehindSQL
		}
		if owned {
			filter = "AND " + partitionExpr + " = ANY($1::int[])"
			first = 2
		}
		paused := first
		if behind {
			paused = first + 2
		}
		q = strings.NewReplacer("{partition_filter}", filter,
			"{p1}", "$"+strconv.Itoa(first), "{p2}", "$"+strconv.Itoa(first+1),
			"{paused}", "$"+strconv.Itoa(paused), "{consumers}", "$"+strconv.Itoa(paused+1),
			"{horizon}", "$"+strconv.Itoa(paused+2), "{probe}", "$"+strconv.Itoa(paused+3)).Replace(q)
		return r.Replace(size.Replace(q))
	}
	return claimSet{size: n, all: claim(false, false), owned: claim(true, false),
		allBehind: claim(false, true), ownedBehind: claim(true, true)}
}

// The visibility watermark's statements (watermark.go).
const (
	// sampleSnapshotSQL reads the snapshot (xmin, xmax, in-progress xids)
	// and the highest id visible in it: pg_current_snapshot() is the
	// statement's own snapshot. max(id) reads the end of the primary key.
	sampleSnapshotSQL = `SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,
       ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) x),
       (SELECT coalesce(max(id), 0) FROM {s}.aa_outbox_event)
FROM pg_current_snapshot() s`

	// outboxWritersSQL lists the transactions (xid, pid; no pid for a
	// prepared one) that took an id from the outbox's sequence: nextval()
	// locks the sequence (RowExclusiveLock) for the rest of the
	// transaction, before it returns the id. Those that only update
	// outbox rows (the relays' acks, an operator's FOR UPDATE) or read them
	// do not count. Each transaction also holds the lock on its own xid,
	// which names it.
	outboxWritersSQL = `SELECT DISTINCT x.transactionid::text::bigint, x.pid::bigint
FROM pg_locks r JOIN pg_locks x ON x.virtualtransaction = r.virtualtransaction
WHERE r.locktype = 'relation'
  AND r.relation = pg_get_serial_sequence('{s}.aa_outbox_event', 'id')::regclass
  AND r.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND x.locktype = 'transactionid' AND x.mode = 'ExclusiveLock'`
)

// recordOvertakenSQL records events found out of id order (order.go); an
// event delivered again keeps its first record.
const recordOvertakenSQL = `INSERT INTO {s}.aa_outbox_overtaken (event_id, aggregate_type, aggregate_id, after_event_id, instance)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::uuid[], $4::bigint[]), LATERAL (SELECT $5::text) i
ON CONFLICT (event_id) DO NOTHING`
