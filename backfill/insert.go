package backfill

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/routing"
)

// emit is what the events of a chunk carry besides the rows, and where
// they go.
type emit struct {
	schema      string    // of the outbox
	correlation uuid.UUID // the job's
	createdBy   string
}

// insertTmpl writes a chunk's events in one statement, without the rows'
// payloads coming to searchsync and back: the rows of the chunk's key range
// ($1..$2; the range is read as such, then joined with the locked ids $4 by
// hash rather than probed id by id), each checked as outbox.Writer.Write and
// fill check an event; when one is bad, nothing is inserted and the first bad
// one (in key order) is returned with its reason. Otherwise the events go in
// key order, and pg_notify signals the relays at commit as Write does.
// {cols} is the source's columns, {from} its query and range, {outbox} the
// outbox table.
const insertTmpl = `
WITH r AS MATERIALIZED (
  SELECT {cols}
  {from}),
v AS MATERIALIZED (
  SELECT r.*, CASE
    WHEN r.et IS NULL OR r.et = '' THEN 'event_type: is required'
    WHEN r.et !~ '{eventTypeRE}' THEN 'event_type: ' || to_json(r.et)::text ||
      ' does not follow <object>.<type?>.<verb> (lower case, e.g. entity.customer.updated)'
    WHEN r.sv < 0 THEN 'schema_version: ' || r.sv || ' is not >= 1'
    WHEN r.at IS NULL OR r.at = '' THEN 'aggregate_type: is required'
    WHEN r.at !~ '{aggregateTypeRE}' THEN 'aggregate_type: ' || to_json(r.at)::text ||
      ' is not a table-like name (e.g. DDM_ENTITY)'
    WHEN r.id = '00000000-0000-0000-0000-000000000000'::uuid THEN
      'aggregate_id: is the nil UUID; leave it unset for an event without an aggregate'
    WHEN r.p IS NULL THEN 'payload: is required (a JSON object)'
    WHEN jsonb_typeof(r.p) <> 'object' THEN 'payload: must be a JSON object'
    WHEN right(r.et, {suffixLen}) <> '{suffix}' THEN 'event_type ' || to_json(r.et)::text ||
      ' does not end in "{suffix}": a backfill writes snapshot events only'
  END AS bad
  FROM r WHERE r.id IN (SELECT unnest($4::uuid[]))),
ins AS (
  INSERT INTO {outbox}
      (tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
       correlation_id, payload, created_by)
  SELECT v.tenant, v.et, CASE WHEN v.sv = 0 THEN 1 ELSE v.sv END, v.at, v.id, $5::uuid, v.p, $6::text
  FROM v WHERE NOT EXISTS (SELECT 1 FROM v WHERE v.bad IS NOT NULL)
  ORDER BY v.kk
  RETURNING 1)
SELECT (SELECT count(*) FROM ins), b.k, b.bad, pg_notify($7::text, '')
FROM (SELECT 1) one LEFT JOIN LATERAL (
  SELECT v.k, v.bad FROM v WHERE v.bad IS NOT NULL ORDER BY v.kk LIMIT 1) b ON true`

// prepareInsert fills insertTmpl in with the source's columns; the outbox
// table stays a placeholder until the schema is known (insert).
func (r *Reader) prepareInsert(key, from, tenant, schema, aggType string) {
	cols := key + " AS kk, " + key + "::text AS k, s.aggregate_id AS id, s.event_type::text AS et, " +
		"s.payload::jsonb AS p, " + tenant + " AS tenant, " + schema + " AS sv, " + aggType + " AS at"
	r.insertSQL = strings.NewReplacer(
		"{cols}", cols,
		"{from}", from+"WHERE "+key+" >= $1::text::"+r.keyType+" AND "+key+" <= $2::text::"+r.keyType,
		"{eventTypeRE}", outbox.EventTypePattern,
		"{aggregateTypeRE}", outbox.AggregateTypePattern,
		"{suffixLen}", fmt.Sprint(len(routing.SnapshotSuffix)),
		"{suffix}", routing.SnapshotSuffix,
	).Replace(insertTmpl)
}

// insert writes the events of the chunk's rows from first to last (keys)
// of the locked aggregates ids in tx; see insertTmpl.
func (r *Reader) insert(ctx context.Context, tx pgx.Tx, w *outbox.Writer, o emit, first, last string, ids []pgtype.UUID) (int, error) {
	// The table's placeholder is the last one: the source's query, which
	// might hold the same text, comes before it.
	i := strings.LastIndex(r.insertSQL, "{outbox}")
	sql := r.insertSQL[:i] + pgx.Identifier{o.schema, "aa_outbox_event"}.Sanitize() + r.insertSQL[i+len("{outbox}"):]
	var (
		n        int
		key, bad *string
	)
	if err := tx.QueryRow(ctx, sql, first, last, r.src.AggregateType, ids, o.correlation, o.createdBy, w.Channel()).
		Scan(&n, &key, &bad, nil); err != nil {
		return 0, fmt.Errorf("backfill source %s: write events: %w", r.src.Name, err)
	}
	if bad != nil {
		return 0, &RowError{Source: r.src.Name, Key: *key, Reason: *bad}
	}
	return n, nil
}
