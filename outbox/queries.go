package outbox

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// Channel returns the NOTIFY channel of the outbox in schema.
func Channel(schema string) string { return schema + ".outbox" }

// lockAggregatesSQL takes one transaction-scoped advisory lock per distinct
// aggregate key, in key order (the OFFSET 0 subquery fixes the order in which
// the locks are taken, so two writers of the same aggregates cannot deadlock).
// The key expression is the documented one for plain-SQL producers.
const lockAggregatesSQL = `
SELECT pg_advisory_xact_lock(k)
FROM (SELECT DISTINCT hashtextextended(t || '/' || id::text, 0) AS k
      FROM unnest($1::text[], $2::uuid[]) AS u(t, id)
      ORDER BY k OFFSET 0) AS keys`

// insertEventsSQL inserts every event of a Write call in one statement.
const insertEventsSQL = `
INSERT INTO {schema}.aa_outbox_event
    (tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
     audit_log_id, correlation_id, payload, created_by)
SELECT tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
       audit_log_id, correlation_id, payload::jsonb, coalesce(created_by, current_user)
FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::uuid[],
            $6::bigint[], $7::uuid[], $8::text[], $9::text[])
     WITH ORDINALITY AS e(tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
                          audit_log_id, correlation_id, payload, created_by, ord)
ORDER BY ord
RETURNING id`

// queries holds the producer's SQL with the schema filled in.
type queries struct {
	channel        string
	lockAggregates string
	insertEvents   string
	notify         string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer("{schema}", pgx.Identifier{schema}.Sanitize())
	return queries{
		channel:        Channel(schema),
		lockAggregates: lockAggregatesSQL,
		insertEvents:   r.Replace(insertEventsSQL),
		notify:         `SELECT pg_notify($1, '')`,
	}
}
