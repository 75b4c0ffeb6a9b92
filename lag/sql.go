package lag

import (
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/outbox"
)

type queries struct {
	lastID, heads, pending, deliveryRows, failedGroups, pauses, pausedAggregates, failures string
	outOfOrder, relays, throughput                                                         string
}

// headsCTE folds the heads ($1 aggregate types, $2 aggregate ids, $3
// consumers ("*" = all), $4 head ids) per aggregate.
// lo is where the aggregate's undelivered events start: its first head or
// open delivery row.
const headsCTE = `
WITH h AS (
	SELECT h.aggregate_type, h.aggregate_id, h.cs, h.ids,
	       least(h.first, (SELECT min(d.event_id) FROM {d} d
	                       WHERE d.aggregate_type = h.aggregate_type AND d.aggregate_id = h.aggregate_id
	                         AND d.state <> 'done')) AS lo
	FROM (SELECT aggregate_type, aggregate_id, array_agg(consumer) AS cs, array_agg(head_id) AS ids, min(head_id) AS first
	      FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bigint[]) AS h(aggregate_type, aggregate_id, consumer, head_id)
	      GROUP BY aggregate_type, aggregate_id) h
)`

// blockedFor is the consumers an earlier head of e's aggregate holds back
// ({"*"}: all); evaluated only for events of blocked aggregates.
const blockedFor = `CASE WHEN h.aggregate_id IS NULL THEN '{}'::text[]
	ELSE ARRAY(SELECT u.c FROM unnest(h.cs, h.ids) AS u(c, i) WHERE u.i < {id} ORDER BY u.c) END`

func newQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("{s}", s, "{t}", s+".aa_outbox_event", "{d}", s+".aa_outbox_delivery",
		"{c}", s+".aa_outbox_consumer", "{seq}", s+".aa_outbox_event_id_seq",
		"{blocked_for}", strings.ReplaceAll(blockedFor, "{id}", "e.id"),
		"{blocked_for_d}", strings.ReplaceAll(blockedFor, "{id}", "d.event_id"))
	return queries{
		lastID:           r.Replace(lastIDSQL),
		relays:           r.Replace(relaysSQL),
		throughput:       r.Replace(throughputSQL),
		outOfOrder:       r.Replace(outOfOrderSQL),
		heads:            r.Replace(headsSQL),
		pending:          r.Replace(pendingSQL),
		deliveryRows:     r.Replace(deliveryRowsSQL),
		failedGroups:     r.Replace(failedGroupsSQL),
		pauses:           r.Replace(pausesSQL),
		pausedAggregates: r.Replace(pausedAggregatesSQL),
		failures:         r.Replace(failuresSQL),
	}
}

// The snapshot's statements ({s} the schema, {t}, {d}, {c} its outbox,
// delivery and consumer tables, {seq} the outbox id sequence).
const (
	lastIDSQL = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {seq}`

	relaysSQL = `SELECT count(*) FILTER (WHERE expires_at > now()), max(heartbeat_at) FROM {s}.aa_relay_instance`

	throughputSQL = `SELECT consumer, sum(events)::bigint FROM {s}.aa_consumer_throughput
			WHERE second >= $1 AND second < $2 GROUP BY consumer`

	// Few rows (compaction keeps the retention's): the count of a day
	// and the newest.
	outOfOrderSQL = `
			SELECT (SELECT count(*) FROM {s}.aa_outbox_overtaken WHERE detected_at > now() - interval '24 hours'),
			       o.event_id, coalesce(o.after_event_id, 0), coalesce(o.aggregate_type, ''),
			       coalesce(o.aggregate_id, '00000000-0000-0000-0000-000000000000'), coalesce(o.detected_at, 'epoch')
			FROM (SELECT 1) one
			LEFT JOIN LATERAL (SELECT * FROM {s}.aa_outbox_overtaken ORDER BY detected_at DESC, event_id DESC LIMIT 1) o ON true`

	// The first blocker per aggregate and consumer ("*": the event row,
	// which blocks every consumer), with the pending events behind it
	// per event_type. Blockers: events without open delivery rows that
	// are failed or backing off, and delivery rows that are.
	headsSQL = `
			WITH cand AS (
				SELECT '*'::text AS consumer, e.aggregate_type, e.aggregate_id, e.id, e.event_type,
				       'failed'::text AS status, 'failed'::text AS cause, e.attempts,
				       coalesce(e.last_error, '') AS last_error, e.available_at, e.created_at
				FROM {t} e
				WHERE e.status = 'failed' AND e.aggregate_id IS NOT NULL
				  AND NOT EXISTS (SELECT 1 FROM {d} d WHERE d.event_id = e.id AND d.state <> 'done')
				UNION ALL
				SELECT '*', e.aggregate_type, e.aggregate_id, e.id, e.event_type, 'pending', 'backing_off', e.attempts,
				       coalesce(e.last_error, ''), e.available_at, e.created_at
				FROM {t} e
				WHERE e.status = 'pending' AND e.available_at > now() AND e.available_at < ` + outbox.HeldSQL + ` AND e.aggregate_id IS NOT NULL
				  -- Not implied by the index predicate, so the planner seeks
				  -- ix_outbox_event_pending to (pending, now()) (see relay).
				  AND e.status >= (SELECT 'pending'::{s}.outbox_status)
				  AND NOT EXISTS (SELECT 1 FROM {d} d WHERE d.event_id = e.id AND d.state <> 'done')
				UNION ALL
				SELECT d.consumer, d.aggregate_type, d.aggregate_id, d.event_id, e.event_type, d.state,
				       CASE WHEN d.state = 'failed' THEN 'failed' ELSE 'backing_off' END, d.attempts,
				       coalesce(d.last_error, ''), d.available_at, e.created_at
				FROM {d} d JOIN {t} e ON e.id = d.event_id
				WHERE d.state <> 'done' AND d.aggregate_id IS NOT NULL
				  -- held for a paused consumer: not a head of its own
				  AND (d.state = 'failed' OR (d.available_at > now() AND d.available_at < ` + outbox.HeldSQL + `))),
			heads AS (
				SELECT DISTINCT ON (aggregate_type, aggregate_id, consumer) *
				FROM cand ORDER BY aggregate_type, aggregate_id, consumer, id)
			SELECT h.consumer, h.aggregate_type, h.aggregate_id, h.id, h.event_type, h.status, h.cause, h.attempts,
			       h.last_error, h.available_at, h.created_at,
			       coalesce((SELECT jsonb_object_agg(x.event_type, x.n) FROM (
			           SELECT w.event_type, count(*) AS n FROM {t} w
			           WHERE w.aggregate_type = h.aggregate_type AND w.aggregate_id = h.aggregate_id
			             AND w.id > h.id AND w.status = 'pending'
			           GROUP BY w.event_type) x), '{}'::jsonb)
			FROM heads h`

	// Every pending event once, grouped; split ones (with open delivery
	// rows) are counted per consumer by deliveryRows. The events of
	// unblocked aggregates (nearly all) are grouped straight from the
	// pending index; those of blocked aggregates come through the
	// aggregate index from the aggregate's first head or open row on
	// (nothing before it is pending) and get the consumers held back.
	pendingSQL = headsCTE + `
			SELECT e.aggregate_type, e.event_type, e.available_at <= now(),
			       e.id IN (SELECT event_id FROM {d} WHERE state <> 'done'),
			       '{}'::text[], count(*), min(e.created_at)
			FROM {t} e
			WHERE e.status = 'pending'
			  AND NOT EXISTS (SELECT 1 FROM h WHERE h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id)
			GROUP BY 1, 2, 3, 4
			UNION ALL
			SELECT e.aggregate_type, e.event_type, e.available_at <= now(),
			       e.id IN (SELECT event_id FROM {d} WHERE state <> 'done'),
			       {blocked_for}, count(*), min(e.created_at)
			FROM h
			JOIN {t} e ON e.aggregate_type = h.aggregate_type AND e.aggregate_id = h.aggregate_id
			          AND e.id >= h.lo AND e.status = 'pending'
			GROUP BY 1, 2, 3, 4, 5`

	// Open delivery rows per consumer, without reading the events: the
	// aggregate is copied into the row. The age of a group is the
	// created_at of its first event by id (id order is commit order per
	// aggregate, and differs from created_at order across aggregates by
	// at most the producers' transaction times).
	deliveryRowsSQL = headsCTE + `,
			g AS (
				SELECT d.consumer, d.state, (d.available_at <= now() OR d.available_at = ` + outbox.HeldSQL + `) AS ready, {blocked_for_d} AS blocked_for,
				       count(*) AS n, min(d.event_id) AS first
				FROM {d} d
				LEFT JOIN h ON h.aggregate_type = d.aggregate_type AND h.aggregate_id = d.aggregate_id
				WHERE d.state <> 'done'
				GROUP BY 1, 2, 3, 4)
			SELECT g.consumer, g.state, g.ready, g.blocked_for, g.n,
			       (SELECT e.created_at FROM {t} e WHERE e.id = g.first)
			FROM g`

	failedGroupsSQL = `
			SELECT e.aggregate_type, e.event_type,
			       EXISTS (SELECT 1 FROM {d} d WHERE d.event_id = e.id AND d.state <> 'done'), count(*)
			FROM {t} e WHERE e.status = 'failed'
			GROUP BY 1, 2, 3`

	pausesSQL = `SELECT consumer, state, paused_at, coalesce(reason, ''), probes, probe_at FROM {c}`

	// The aggregates a paused consumer ($7) would otherwise be given
	// events of (an event without an aggregate counts as one); $5/$6
	// are the (aggregate_type, event_type) pairs routed to it.
	pausedAggregatesSQL = headsCTE + `,
			rt AS (SELECT * FROM unnest($5::text[], $6::text[]) AS rt(aggregate_type, event_type)),
			would AS (
				SELECT e.aggregate_type, e.aggregate_id, e.id
				FROM {t} e
				JOIN rt ON rt.aggregate_type = e.aggregate_type AND rt.event_type = e.event_type
				WHERE e.status = 'pending' AND e.available_at <= now()
				  AND NOT EXISTS (SELECT 1 FROM {d} d WHERE d.event_id = e.id AND d.state <> 'done')
				  AND NOT EXISTS (SELECT 1 FROM h WHERE h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id)
				UNION ALL
				SELECT e.aggregate_type, e.aggregate_id, e.id
				FROM h
				JOIN {t} e ON e.aggregate_type = h.aggregate_type AND e.aggregate_id = h.aggregate_id
				          AND e.id >= h.lo AND e.status = 'pending'
				JOIN rt ON rt.aggregate_type = e.aggregate_type AND rt.event_type = e.event_type
				WHERE e.available_at <= now()
				  AND NOT EXISTS (SELECT 1 FROM {d} d WHERE d.event_id = e.id AND d.state <> 'done')
				  AND NOT ({blocked_for} && ARRAY['*', $7::text])
				UNION ALL
				SELECT e.aggregate_type, e.aggregate_id, e.id
				FROM {d} d
				JOIN {t} e ON e.id = d.event_id
				LEFT JOIN h ON h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id
				WHERE d.consumer = $7 AND d.state = 'pending' AND (d.available_at <= now() OR d.available_at = ` + outbox.HeldSQL + `)
				  AND NOT ({blocked_for} && ARRAY['*', $7::text]))
			SELECT count(*) FROM (
				SELECT 1 FROM would
				GROUP BY aggregate_type, aggregate_id, CASE WHEN aggregate_id IS NULL THEN id END) x`

	failuresSQL = `
			SELECT id, event_type, aggregate_type, aggregate_id, attempts, coalesce(last_error, ''), created_at
			FROM {t} WHERE status = 'failed' ORDER BY id DESC LIMIT $1`
)
