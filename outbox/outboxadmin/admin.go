package outboxadmin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/routing"
)

// Operator actions on the outbox (`searchsync outbox …`, and the console's
// actions, which call the same methods). All their SQL is in this file.
//
// Retry (failed → pending) sets attempts = 0 and available_at = now(): the
// event gets the full max_attempts again, at once. last_error is kept (it says
// why the event had failed) until the next attempt overwrites it. A retry
// also moves every failed row of the selected events in aa_outbox_delivery
// (see docs/consumers.md) back to pending the same way, so it selects the
// events whose outbox row is failed and those with a failed delivery row.
//
// Ack (acknowledge by hand) hard-deletes the selected failed and skipped
// events and records one aa_job row of kind outbox_ack (state succeeded) that
// says who acknowledged what: ids, event types, aggregates, attempts and last
// errors. AA_AUDIT_LOG stays the long-term truth of the business change, and
// the aa_job row is the record of the acknowledgement. Deleting a failed head
// unblocks its aggregate: the later events flow on, the acknowledged one is
// never delivered. Compaction never touches failed or skipped events; ack is
// the only way they leave the table. Delivery rows go with their event, in
// the same statement (no foreign key: a cascade would cost compaction a
// look-up per deleted row).
//
// Skip sets failed events skipped by hand, for an event that must not block
// its aggregate but whose row should stay: only pending and failed events
// block (an aggregate's head is its first event that is neither dispatched
// nor skipped), so the later events of its aggregate flow on; the skipped
// one is never delivered, keeps attempts and last_error as the evidence of
// why, is never compacted and stays until it is acknowledged (Ack takes
// skipped events). An event whose consumers diverged has its failed
// delivery rows marked done (delivered_at stays NULL: not delivered), so
// that they stop blocking their consumers' later events; the aa_job row
// (outbox_skip) records them as they were. Only failed events are skipped:
// a status other than failed is refused, and so are ids of events that are
// not failed (nothing is done). Skip takes no consumer: one consumer's
// failed delivery marked done without delivering it is what Ack with
// Filter.Consumer does, so Skip refuses one and names that instead.
//
// # One consumer (Filter.Consumer)
//
// With Filter.Consumer C, list, retry and ack look at what C owes. An event
// whose consumers diverged has a row per routed consumer in
// aa_outbox_delivery, and C's row is what counts; an event without delivery
// rows is C's when it is routed to C (Routing, from the configuration), and
// its outbox row is C's state (it is shared by every routed consumer).
//
//   - list: the events C still owes or parked (C's state pending or failed).
//   - retry: C's failed rows become pending (attempts 0, available now) and
//     their outbox rows pending, available now; a failed event without
//     delivery rows is retried whole, as without a consumer: the relay keeps
//     its routed consumers' state together there.
//   - ack: C's failed rows become done (attempts and last_error kept); an event
//     none of whose rows is then pending or failed is finished and deleted as
//     an unqualified ack deletes it. A failed event without delivery rows that
//     is routed to other consumers too is split: C gets a done row, every other
//     routed consumer a pending one (attempts 0, available now), and the
//     outbox row turns pending, so the others still get it; routed to C alone,
//     it is deleted.
//
// After a change to delivery rows the outbox row is summarised again as
// docs/consumers.md says: pending while a row is pending, else failed;
// attempts the highest of the rows; available_at the earliest of the pending
// rows. last_error is left as it is.
//
// Every change runs in one transaction, locks the events and their delivery
// rows it changes (FOR UPDATE) and checks them again under the lock, records
// an aa_job row (outbox_retry / outbox_ack / outbox_skip, with the consumer
// when one was named) and NOTIFY the relays. Each refuses a selection that names no ids
// and no narrowing filter unless it says All; a consumer alone is not a
// narrowing filter (`--consumer webhook --all` acts on all of webhook's).

// Job kinds of the operator actions in aa_job.
const (
	JobKindAck   = "outbox_ack"
	JobKindRetry = "outbox_retry"
	JobKindSkip  = "outbox_skip"
)

// maxAuditDetails bounds the events described one by one in an aa_job result
// (every id is recorded all the same).
const maxAuditDetails = 1000

// ErrNoSelection reports a retry, ack or skip without ids or a narrowing
// filter.
var ErrNoSelection = errors.New("no selection: name event ids or a filter (event type, aggregate type or id, index, error, created since/until), or say all (--all)")

// DB is what the operator actions need of a connection (*pgxpool.Pool,
// *pgx.Conn or a pgx.Tx).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Filter selects events. Zero fields do not filter.
type Filter struct {
	IDs []int64
	// Statuses are outbox row statuses; with Consumer they are the
	// consumer's states instead (pending or failed: its delivery row's state,
	// or the outbox row's when the event has no delivery rows).
	Statuses []outbox.Status
	// Consumer restricts the selection to what this consumer owes or parked
	// (see "One consumer" above). It needs Admin.WithRouting.
	Consumer string
	// EventType and AggregateType are patterns: * matches any run of
	// characters, ? one character; anything else matches itself.
	EventType     string
	AggregateType string
	// Kinds selects events of any of these kinds (each its event type and
	// aggregate type patterns); nil: no bound. Filter.Index fills it.
	Kinds []Kind
	// Index selects the events whose projection writes this index (alias):
	// Admin.WithIndexes turns it into Kinds and, when one consumer alone
	// writes the index and Consumer is empty, that Consumer.
	Index string
	// Error is a pattern matched anywhere in last_error, ignoring case, with
	// * and ? as in EventType ("mapper_parsing", "HTTP 4??"). With
	// Consumer it is the consumer's last_error: its delivery row's, or the
	// outbox row's when the event has no delivery rows. An event without a
	// last_error never matches.
	Error       string
	AggregateID *uuid.UUID
	// Since and Until bound created_at: Since <= created_at < Until.
	Since, Until time.Time
	// AfterID selects events with a greater id only: the next page of a
	// listing after its last event. 0: no bound.
	AfterID int64
	// Limit bounds the events selected (oldest id first). 0: no bound.
	Limit int
}

// Kind is a kind of event: an event type and an aggregate type pattern (as
// Filter.EventType; "" matches any aggregate type).
type Kind struct {
	EventType     string `json:"event_type"`
	AggregateType string `json:"aggregate_type,omitempty"`
}

// Narrows reports whether the filter names ids or narrows by anything but
// status, consumer and limit.
func (f Filter) Narrows() bool {
	return len(f.IDs) > 0 || f.EventType != "" || f.AggregateType != "" || f.AggregateID != nil ||
		!f.Since.IsZero() || !f.Until.IsZero() || f.Kinds != nil || f.Index != "" || f.Error != ""
}

// errorLike is the ILIKE pattern of Filter.Error (nil when it is empty).
func (f Filter) errorLike() *string {
	if f.Error == "" {
		return nil
	}
	p := "%" + globToLike(f.Error) + "%"
	return &p
}

// args are the filter's positional parameters $1…$11 of filterSQL followed
// by the limit ($12). With a consumer, the statuses are the consumer's
// states and do not go into $2, and the error pattern is matched against
// the consumer's last_error (selectOwed), not in $11.
func (f Filter) args() []any {
	var ids []int64
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	var statuses []string
	if f.Consumer == "" {
		statuses = f.statusStrings()
	}
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		p := globToLike(s)
		return &p
	}
	optTime := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	var limit *int
	if f.Limit > 0 {
		limit = &f.Limit
	}
	var after *int64
	if f.AfterID > 0 {
		after = &f.AfterID
	}
	var kindTypes, kindAggs []*string
	if f.Kinds != nil {
		kindTypes, kindAggs = []*string{}, []*string{}
		for _, k := range f.Kinds {
			kindTypes, kindAggs = append(kindTypes, opt(k.EventType)), append(kindAggs, opt(k.AggregateType))
		}
	}
	errLike := f.errorLike()
	if f.Consumer != "" {
		errLike = nil
	}
	return []any{ids, statuses, opt(f.EventType), opt(f.AggregateType), f.AggregateID, optTime(f.Since), optTime(f.Until), after,
		kindTypes, kindAggs, errLike, limit}
}

func (f Filter) statusStrings() []string {
	var out []string
	for _, s := range f.Statuses {
		out = append(out, string(s))
	}
	return out
}

// globToLike turns a * / ? pattern into a LIKE pattern (escape \).
func globToLike(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '\\', '%', '_':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '*':
			b.WriteByte('%')
		case '?':
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// filterSQL is the WHERE clause of every selection, on the events aliased e;
// its parameters are Filter.args ($1…$11; $12 is the LIMIT of the
// statement). $9 and $10 are the kinds (pairwise; a NULL aggregate type
// matches any), $11 the ILIKE pattern of last_error.
const filterSQL = `
    ($1::bigint[] IS NULL OR e.id = ANY($1))
AND ($2::text[] IS NULL OR e.status::text = ANY($2))
AND ($3::text IS NULL OR e.event_type LIKE $3)
AND ($4::text IS NULL OR e.aggregate_type LIKE $4)
AND ($5::uuid IS NULL OR e.aggregate_id = $5)
AND ($6::timestamptz IS NULL OR e.created_at >= $6)
AND ($7::timestamptz IS NULL OR e.created_at < $7)
AND ($8::bigint IS NULL OR e.id > $8)
AND ($9::text[] IS NULL OR EXISTS (SELECT 1 FROM unnest($9::text[], $10::text[]) AS k(event_type, aggregate_type)
     WHERE e.event_type LIKE k.event_type AND (k.aggregate_type IS NULL OR e.aggregate_type LIKE k.aggregate_type)))
AND ($11::text IS NULL OR e.last_error ILIKE $11)`

const eventColumns = `id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id, audit_log_id,
correlation_id, payload, status::text, attempts, last_error, available_at, dispatched_at, created_at, created_by`

const (
	statusCountsSQL = `
SELECT aggregate_type, status::text, count(*), min(created_at), now()
FROM {t}
GROUP BY aggregate_type, status
ORDER BY aggregate_type, status`

	listSQL = `SELECT ` + eventColumns + ` FROM {t} e WHERE ` + filterSQL + ` ORDER BY id LIMIT $12`

	// selectStatusSQL is the selection of an ack (and a dry run's): $13 are the
	// statuses the action applies to.
	selectStatusSQL = `SELECT ` + eventColumns + ` FROM {t} e WHERE ` + filterSQL +
		` AND e.status::text = ANY($13) ORDER BY id LIMIT $12`

	// selectRetrySQL is the selection of an unqualified retry: failed events
	// and events with a failed delivery row.
	selectRetrySQL = `SELECT ` + eventColumns + ` FROM {t} e WHERE ` + filterSQL + `
AND (e.status = 'failed' OR EXISTS (SELECT 1 FROM {d} d WHERE d.event_id = e.id AND d.state = 'failed'))
ORDER BY id LIMIT $12`

	// routedPairsSQL lists the (event_type, aggregate_type) pairs of the
	// events without delivery rows whose status is one of $12: the caller
	// keeps those routed to the consumer and passes them to selectOwedSQL.
	// (Their outbox row is the consumer's: $11 is the error pattern here.)
	routedPairsSQL = `SELECT DISTINCT e.event_type, e.aggregate_type FROM {t} e WHERE ` + filterSQL + `
AND e.status::text = ANY($12) AND NOT EXISTS (SELECT 1 FROM {d} d WHERE d.event_id = e.id)`

	// selectOwedSQL selects what consumer $13 owes in the states $14: its
	// delivery rows in those states, and the events without delivery rows in
	// those statuses whose (event_type, aggregate_type) is one of the routed
	// pairs ($15, $16). $17 is the error pattern, matched against the
	// consumer's last_error: its delivery row's, or the outbox row's of an
	// event without delivery rows.
	selectOwedSQL = `
WITH owed AS (
    SELECT d.event_id AS id FROM {d} d WHERE d.consumer = $13 AND d.state = ANY($14)
      AND ($17::text IS NULL OR d.last_error ILIKE $17)
    UNION ALL
    SELECT o.id FROM {t} o
    WHERE o.status::text = ANY($14)
      AND (o.event_type, o.aggregate_type) IN (SELECT * FROM unnest($15::text[], $16::text[]))
      AND NOT EXISTS (SELECT 1 FROM {d} d WHERE d.event_id = o.id)
      AND ($17::text IS NULL OR o.last_error ILIKE $17)
)
SELECT ` + eventColumns + ` FROM {t} e WHERE e.id IN (SELECT id FROM owed) AND ` + filterSQL + `
ORDER BY id LIMIT $12`

	deliveriesSQL = `
SELECT event_id, consumer, state, attempts, last_error, available_at, delivered_at
FROM {d} WHERE event_id = ANY($1) ORDER BY event_id, consumer`

	retrySQL = `
UPDATE {t} SET status = 'pending', attempts = 0, available_at = now()
WHERE id = ANY($1) AND status = 'failed'`

	// skipSQL sets failed events skipped; attempts, last_error and
	// available_at stay as the evidence of why.
	skipSQL = `UPDATE {t} SET status = 'skipped' WHERE id = ANY($1) AND status = 'failed'`

	// retryDeliveriesSQL and ackDeliveriesSQL change the failed delivery
	// rows ($1 event ids, $2 consumers, pairwise).
	retryDeliveriesSQL = `
UPDATE {d} d SET state = 'pending', attempts = 0, available_at = now(), updated_at = now()
FROM unnest($1::bigint[], $2::text[]) AS u(event_id, consumer)
WHERE d.event_id = u.event_id AND d.consumer = u.consumer AND d.state = 'failed'`

	ackDeliveriesSQL = `
UPDATE {d} d SET state = 'done', updated_at = now()
FROM unnest($1::bigint[], $2::text[]) AS u(event_id, consumer)
WHERE d.event_id = u.event_id AND d.consumer = u.consumer AND d.state = 'failed'`

	// insertDeliveriesSQL splits events: one row per (event $1, consumer $2)
	// in state $3 with attempts $4 and last_error $5, available now.
	insertDeliveriesSQL = `
INSERT INTO {d} (event_id, consumer, aggregate_type, aggregate_id, state, attempts, last_error, available_at)
SELECT u.event_id, u.consumer, e.aggregate_type, e.aggregate_id, u.state, u.attempts, u.last_error, now()
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::text[]) AS u(event_id, consumer, state, attempts, last_error)
JOIN {t} e ON e.id = u.event_id`

	// summariseSQL sets the outbox rows of events $1 from their delivery rows
	// (docs/consumers.md): pending while one is pending, else failed while one
	// is failed; attempts the highest; available_at the earliest pending one.
	summariseSQL = `
UPDATE {t} e SET
    status = CASE WHEN s.pending THEN 'pending' WHEN s.failed THEN 'failed' ELSE e.status END,
    attempts = s.attempts,
    available_at = coalesce(s.next_at, e.available_at)
FROM (SELECT event_id, bool_or(state = 'pending') AS pending, bool_or(state = 'failed') AS failed,
             max(attempts) AS attempts, min(available_at) FILTER (WHERE state = 'pending') AS next_at
      FROM {d} WHERE event_id = ANY($1) GROUP BY event_id) s
WHERE e.id = s.event_id`

	ackSQL = `WITH d AS (
	DELETE FROM {d} WHERE event_id IN (SELECT id FROM {t} WHERE id = ANY($1) AND status IN ('failed', 'skipped')))
DELETE FROM {t} WHERE id = ANY($1) AND status IN ('failed', 'skipped')`

	// finishSQL deletes events whose every delivery row is done after an ack
	// for one consumer (checked under the lock; their status is not).
	finishSQL = `WITH d AS (DELETE FROM {d} WHERE event_id = ANY($1))
DELETE FROM {t} WHERE id = ANY($1)`

	// The consumers that are not configured ($1 the configured ones) but
	// have open delivery rows or a pause row: their rows' counts and pause
	// state.
	deliveryCountsSQL = `SELECT consumer, state, count(*) FROM {d} WHERE state <> 'done' AND consumer <> ALL($1) GROUP BY consumer, state`

	consumerStatesSQL = `
SELECT consumer, state, paused_at, reason, probes, probe_at, instance, updated_at
FROM {c} WHERE consumer <> ALL($1) ORDER BY consumer`

	// recordJobSQL records a finished operator action. $1 kind, $2 owner,
	// $3 params, $4 result.
	recordJobSQL = `
INSERT INTO {job} (job_kind, state, owner, params, result, started_at, heartbeat_at, finished_at)
VALUES ($1, 'succeeded', $2, $3, $4 || jsonb_build_object('db_user', current_user), now(), now(), now())
RETURNING id`
)

type adminQueries struct {
	statusCounts, list, selectStatus, selectRetry, routedPairs, selectOwed, deliveries    string
	retry, retryDeliveries, ackDeliveries, insertDeliveries, summarise, ack, finish, skip string
	deliveryCounts, consumerStates, recordJob, notify                                     string
	channel                                                                               string
}

func newAdminQueries(schema string) adminQueries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("{t}", s+".aa_outbox_event", "{d}", s+".aa_outbox_delivery",
		"{c}", s+".aa_outbox_consumer", "{job}", s+".aa_job")
	return adminQueries{
		statusCounts:     r.Replace(statusCountsSQL),
		list:             r.Replace(listSQL),
		selectStatus:     r.Replace(selectStatusSQL),
		selectRetry:      r.Replace(selectRetrySQL),
		routedPairs:      r.Replace(routedPairsSQL),
		selectOwed:       r.Replace(selectOwedSQL),
		deliveries:       r.Replace(deliveriesSQL),
		retry:            r.Replace(retrySQL),
		skip:             r.Replace(skipSQL),
		retryDeliveries:  r.Replace(retryDeliveriesSQL),
		ackDeliveries:    r.Replace(ackDeliveriesSQL),
		insertDeliveries: r.Replace(insertDeliveriesSQL),
		summarise:        r.Replace(summariseSQL),
		ack:              r.Replace(ackSQL),
		finish:           r.Replace(finishSQL),
		deliveryCounts:   r.Replace(deliveryCountsSQL),
		consumerStates:   r.Replace(consumerStatesSQL),
		recordJob:        r.Replace(recordJobSQL),
		notify:           `SELECT pg_notify($1, '')`,
		channel:          outbox.Channel(schema),
	}
}

// Admin runs the operator queries on the outbox of one schema.
type Admin struct {
	schema  string
	q       adminQueries
	routing *routing.Table
	indexes []Index
}

// New returns the operator queries for schema (default "mdm").
func New(schema string) *Admin {
	schema = cmp.Or(schema, "mdm")
	return &Admin{schema: schema, q: newAdminQueries(schema)}
}

// WithRouting returns a copy of a that knows the consumers and routes: what
// Filter.Consumer and the per-consumer views need. This package does
// not read the configuration; the caller gives the routing table built from
// it.
func (a *Admin) WithRouting(t *routing.Table) *Admin {
	c := *a
	c.routing = t
	return &c
}

// Index is what the operator actions know of one index (alias) of the
// search consumers: which consumers write it and the kinds of events whose
// projection writes it. The caller builds it from the configuration and
// the projections (cmd/searchsync).
type Index struct {
	Name string
	// Consumers are the consumers that write the index.
	Consumers []string
	// Kinds are the event kinds its projections take (patterns).
	Kinds []Kind
	// Problem, when set, is why the index cannot be turned into a filter
	// (a projection pattern the outbox patterns cannot express).
	Problem string
}

// WithIndexes returns a copy of a that knows the indexes: what Filter.Index
// needs.
func (a *Admin) WithIndexes(ix []Index) *Admin {
	c := *a
	c.indexes = slices.Clone(ix)
	return &c
}

// UnknownIndexError is an index name no consumer writes, or one that cannot
// be turned into a filter (Reason).
type UnknownIndexError struct {
	Name   string
	Known  []string
	Reason string
}

func (e *UnknownIndexError) Error() string {
	switch {
	case e.Reason != "":
		return fmt.Sprintf("outbox: index %q: %s", e.Name, e.Reason)
	case len(e.Known) == 0:
		return fmt.Sprintf("outbox: unknown index %q: no search consumer writes an index", e.Name)
	}
	return fmt.Sprintf("outbox: unknown index %q; the indexes of the search consumers are %s", e.Name, strings.Join(e.Known, ", "))
}

// ResolveIndex turns f.Index into the kinds of its projections (f.Kinds) and,
// when f.Consumer is empty and one consumer alone writes the index, that
// consumer. A consumer that does not write the index, an unknown index and
// an index no projection writes are an *UnknownIndexError. Without
// f.Index, f is returned as it is.
func (a *Admin) ResolveIndex(f Filter) (Filter, error) {
	if f.Index == "" {
		return f, nil
	}
	var known []string
	for _, ix := range a.indexes {
		known = append(known, ix.Name)
	}
	i := slices.IndexFunc(a.indexes, func(ix Index) bool { return ix.Name == f.Index })
	if i < 0 {
		return f, &UnknownIndexError{Name: f.Index, Known: known}
	}
	ix := a.indexes[i]
	switch {
	case ix.Problem != "":
		return f, &UnknownIndexError{Name: f.Index, Known: known, Reason: ix.Problem}
	case len(ix.Kinds) == 0:
		return f, &UnknownIndexError{Name: f.Index, Known: known, Reason: "no projection writes it, so no event goes to it"}
	case f.Consumer != "" && !slices.Contains(ix.Consumers, f.Consumer):
		return f, &UnknownIndexError{Name: f.Index, Known: known,
			Reason: fmt.Sprintf("consumer %s does not write it (%s does)", f.Consumer, strings.Join(ix.Consumers, ", "))}
	case f.Consumer == "" && len(ix.Consumers) == 1:
		f.Consumer = ix.Consumers[0]
	}
	f.Kinds = slices.Clone(ix.Kinds)
	return f, nil
}

// UnknownConsumerError is a consumer name that is not configured.
type UnknownConsumerError struct {
	Name  string
	Known []string
}

func (e *UnknownConsumerError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("outbox: unknown consumer %q: no consumers are configured", e.Name)
	}
	return fmt.Sprintf("outbox: unknown consumer %q; the configured consumers are %s", e.Name, strings.Join(e.Known, ", "))
}

// CheckConsumer returns nil when name is a configured consumer, an
// *UnknownConsumerError naming the configured ones when it is not, and an
// error when a knows no routing (WithRouting).
func (a *Admin) CheckConsumer(name string) error {
	if a.routing == nil {
		return errors.New("outbox: selecting by consumer needs the configured consumers and routes (Admin.WithRouting)")
	}
	if !slices.Contains(a.routing.Consumers, name) {
		return &UnknownConsumerError{Name: name, Known: slices.Clone(a.routing.Consumers)}
	}
	return nil
}

// StatusReport is the outbox's census: its events counted by status and
// aggregate type, the whole table (dispatched and skipped included), and
// the consumers that are no longer configured but still have rows. What
// each configured consumer owes and what is blocked is the lag read model's
// (package lag), which `searchsync outbox status`, `status`, /metrics and
// the console all read.
type StatusReport struct {
	At       time.Time               `json:"at"`
	Total    int64                   `json:"total"`
	ByStatus map[outbox.Status]int64 `json:"by_status"`
	// AggregateTypes has one entry per aggregate_type, by name.
	AggregateTypes []TypeCounts `json:"aggregate_types"`
	// OldestPending is the created_at of the oldest pending event (nil when
	// none is pending) and OldestPendingAge its age in seconds.
	OldestPending    *time.Time `json:"oldest_pending"`
	OldestPendingAge float64    `json:"oldest_pending_age_seconds"`
	// Unconfigured has one entry per consumer that is not configured (not
	// in WithRouting's consumers) but still has open delivery rows or a
	// pause row, by name.
	Unconfigured []ConsumerStatus `json:"unconfigured_consumers"`
}

// ConsumerStatus is what the rows of a consumer that is not configured
// hold, and whether it was paused.
type ConsumerStatus struct {
	Consumer string `json:"consumer"`
	// Pending and Failed count its delivery rows in those states.
	Pending int64 `json:"pending"`
	Failed  int64 `json:"failed"`
	// State is running or paused (aa_outbox_consumer; running when the
	// consumer never paused). PausedAt, Reason, Probes (failed probes) and
	// ProbeAt (the next probe) say since when, why and what next.
	State     string     `json:"state"`
	PausedAt  *time.Time `json:"paused_at"`
	Reason    *string    `json:"reason"`
	Probes    int        `json:"probes"`
	ProbeAt   *time.Time `json:"probe_at"`
	Instance  *string    `json:"instance"`
	UpdatedAt *time.Time `json:"updated_at"`
}

// TypeCounts are the counts of one aggregate_type.
type TypeCounts struct {
	AggregateType    string                  `json:"aggregate_type"`
	ByStatus         map[outbox.Status]int64 `json:"by_status"`
	OldestPending    *time.Time              `json:"oldest_pending"`
	OldestPendingAge float64                 `json:"oldest_pending_age_seconds"`
}

// Status counts events by status and aggregate_type and lists the
// consumers that are not configured but still have rows (StatusReport).
func (a *Admin) Status(ctx context.Context, db DB) (*StatusReport, error) {
	rep := &StatusReport{ByStatus: map[outbox.Status]int64{}, AggregateTypes: []TypeCounts{}}
	for _, s := range []outbox.Status{outbox.StatusPending, outbox.StatusDispatched, outbox.StatusFailed, outbox.StatusSkipped} {
		rep.ByStatus[s] = 0
	}
	rows, err := db.Query(ctx, a.q.statusCounts)
	if err != nil {
		return nil, fmt.Errorf("outbox: count events in %s.aa_outbox_event: %w", a.schema, err)
	}
	var (
		atype, status string
		n             int64
		oldest, now   time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&atype, &status, &n, &oldest, &now}, func() error {
		rep.At = now
		if len(rep.AggregateTypes) == 0 || rep.AggregateTypes[len(rep.AggregateTypes)-1].AggregateType != atype {
			rep.AggregateTypes = append(rep.AggregateTypes, TypeCounts{AggregateType: atype, ByStatus: map[outbox.Status]int64{}})
		}
		tc := &rep.AggregateTypes[len(rep.AggregateTypes)-1]
		tc.ByStatus[outbox.Status(status)] = n
		rep.ByStatus[outbox.Status(status)] += n
		rep.Total += n
		if outbox.Status(status) == outbox.StatusPending {
			o := oldest
			tc.OldestPending, tc.OldestPendingAge = &o, now.Sub(o).Seconds()
			if rep.OldestPending == nil || o.Before(*rep.OldestPending) {
				rep.OldestPending, rep.OldestPendingAge = &o, now.Sub(o).Seconds()
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: count events in %s.aa_outbox_event: %w", a.schema, err)
	}
	if rep.At.IsZero() {
		rep.At = time.Now()
	}
	if rep.Unconfigured, err = a.unconfigured(ctx, db); err != nil {
		return nil, err
	}
	return rep, nil
}

// unconfigured lists the consumers that are not configured but have open
// delivery rows or a pause row, by name.
func (a *Admin) unconfigured(ctx context.Context, db DB) ([]ConsumerStatus, error) {
	out := []ConsumerStatus{}
	byName := map[string]int{}
	get := func(name string) *ConsumerStatus {
		i, ok := byName[name]
		if !ok {
			i = len(out)
			byName[name] = i
			out = append(out, ConsumerStatus{Consumer: name, State: "running"})
		}
		return &out[i]
	}
	configured := []string{}
	if a.routing != nil {
		configured = a.routing.Consumers
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("outbox: %s in %s: %w", what, a.schema, err)
	}
	var (
		name, state string
		n           int64
	)
	rows, err := db.Query(ctx, a.q.deliveryCounts, configured)
	if err != nil {
		return nil, fail("count delivery rows", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&name, &state, &n}, func() error {
		c := get(name)
		switch DeliveryState(state) {
		case DeliveryPending:
			c.Pending += n
		case DeliveryFailed:
			c.Failed += n
		}
		return nil
	}); err != nil {
		return nil, fail("count delivery rows", err)
	}
	rows, err = db.Query(ctx, a.q.consumerStates, configured)
	if err != nil {
		return nil, fail("read aa_outbox_consumer", err)
	}
	var cs ConsumerStatus
	var updated time.Time
	if _, err := pgx.ForEachRow(rows, []any{&name, &cs.State, &cs.PausedAt, &cs.Reason, &cs.Probes, &cs.ProbeAt, &cs.Instance, &updated}, func() error {
		c := get(name)
		c.State, c.PausedAt, c.Reason, c.Probes, c.ProbeAt, c.Instance = cs.State, cs.PausedAt, cs.Reason, cs.Probes, cs.ProbeAt, cs.Instance
		u := updated
		c.UpdatedAt = &u
		return nil
	}); err != nil {
		return nil, fail("read aa_outbox_consumer", err)
	}
	slices.SortFunc(out, func(x, y ConsumerStatus) int { return strings.Compare(x.Consumer, y.Consumer) })
	return out, nil
}

// Matches reports whether an event of this type and aggregate type is of
// the kind (as Filter.Kinds selects it in SQL).
func (k Kind) Matches(eventType, aggregateType string) bool {
	return globMatch(k.EventType, eventType) && (k.AggregateType == "" || globMatch(k.AggregateType, aggregateType))
}

// MatchError reports whether lastError matches the Filter.Error pattern
// (anywhere, ignoring case), as the SQL selection does; "" matches
// everything.
func MatchError(pattern, lastError string) bool {
	return pattern == "" || globMatch("*"+strings.ToLower(pattern)+"*", strings.ToLower(lastError))
}

// globMatch matches s against a * / ? pattern (the whole of s).
func globMatch(p, s string) bool {
	pr, sr := []rune(p), []rune(s)
	// Iterative matching with backtracking to the last *.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(sr) {
		switch {
		case pi < len(pr) && (pr[pi] == '?' || (pr[pi] != '*' && pr[pi] == sr[si])):
			pi, si = pi+1, si+1
		case pi < len(pr) && pr[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi, mark = star+1, mark+1
			si = mark
		default:
			return false
		}
	}
	for pi < len(pr) && pr[pi] == '*' {
		pi++
	}
	return pi == len(pr)
}
