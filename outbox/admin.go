package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Operator actions on the outbox (`searchsync outbox …`). All their SQL is in
// this file.
//
// Retry (failed → pending) sets attempts = 0 and available_at = now(): the
// event gets the full max_attempts again, at once. last_error is kept (it says
// why the event had failed) until the next attempt overwrites it.
//
// Ack (acknowledge by hand) hard-deletes the selected failed and skipped
// events and records one aa_job row of kind outbox_ack (state succeeded) that
// says who acknowledged what: ids, event types, aggregates, attempts and last
// errors. AA_AUDIT_LOG stays the long-term truth of the business change, and
// the aa_job row is the record of the acknowledgement. Deleting a failed head
// unblocks its aggregate: the later events flow on, the acknowledged one is
// never delivered. Compaction never touches failed or skipped events; ack is
// the only way they leave the table.
//
// Both run in one transaction, lock the rows they change (FOR UPDATE), record
// an aa_job row (outbox_retry / outbox_ack) and NOTIFY the relays. Both refuse
// a selection that names no ids and no narrowing filter unless it says All.

// Job kinds of the operator actions in aa_job.
const (
	JobKindAck   = "outbox_ack"
	JobKindRetry = "outbox_retry"
)

// maxAuditDetails bounds the events described one by one in an aa_job result
// (every id is recorded all the same).
const maxAuditDetails = 1000

// ErrNoSelection reports a retry or ack without ids or a narrowing filter.
var ErrNoSelection = errors.New("no selection: name event ids or a filter (event type, aggregate type or id, created since/until), or say all (--all)")

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
	IDs      []int64
	Statuses []Status
	// EventType and AggregateType are patterns: * matches any run of
	// characters, ? one character; anything else matches itself.
	EventType     string
	AggregateType string
	AggregateID   *uuid.UUID
	// Since and Until bound created_at: Since <= created_at < Until.
	Since, Until time.Time
	// Limit bounds the events selected (oldest id first). 0: no bound.
	Limit int
}

// Narrows reports whether the filter names ids or narrows by anything but
// status and limit.
func (f Filter) Narrows() bool {
	return len(f.IDs) > 0 || f.EventType != "" || f.AggregateType != "" || f.AggregateID != nil ||
		!f.Since.IsZero() || !f.Until.IsZero()
}

// args are the filter's positional parameters $1…$8 of filterSQL.
func (f Filter) args() []any {
	var ids []int64
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	var statuses []string
	for _, s := range f.Statuses {
		statuses = append(statuses, string(s))
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
	return []any{ids, statuses, opt(f.EventType), opt(f.AggregateType), f.AggregateID, optTime(f.Since), optTime(f.Until), limit}
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

// filterSQL is the WHERE clause of every selection; its parameters are
// Filter.args ($1…$7; $8 is the LIMIT of the statement).
const filterSQL = `
    ($1::bigint[] IS NULL OR id = ANY($1))
AND ($2::text[] IS NULL OR status::text = ANY($2))
AND ($3::text IS NULL OR event_type LIKE $3)
AND ($4::text IS NULL OR aggregate_type LIKE $4)
AND ($5::uuid IS NULL OR aggregate_id = $5)
AND ($6::timestamptz IS NULL OR created_at >= $6)
AND ($7::timestamptz IS NULL OR created_at < $7)`

const eventColumns = `id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id, audit_log_id,
correlation_id, payload, status::text, attempts, last_error, available_at, dispatched_at, created_at, created_by`

const (
	statusCountsSQL = `
SELECT aggregate_type, status::text, count(*), min(created_at), now()
FROM {t}
GROUP BY aggregate_type, status
ORDER BY aggregate_type, status`

	// The head of an aggregate is its first event that is neither dispatched
	// nor skipped; the aggregate is blocked when the head is failed or
	// pending with available_at in the future (backing off).
	blockedSQL = `
WITH heads AS (
    SELECT DISTINCT ON (aggregate_type, aggregate_id)
           aggregate_type, aggregate_id, id, event_type, status::text AS status, attempts,
           last_error, available_at
    FROM {t}
    WHERE status IN ('pending', 'failed') AND aggregate_id IS NOT NULL
    ORDER BY aggregate_type, aggregate_id, id
), blocked AS (
    SELECT * FROM heads WHERE status = 'failed' OR available_at > now()
)
SELECT b.aggregate_type, b.aggregate_id, b.id, b.event_type, b.status, b.attempts, b.last_error, b.available_at,
       (SELECT count(*) FROM {t} w
        WHERE w.aggregate_type = b.aggregate_type AND w.aggregate_id = b.aggregate_id
          AND w.id > b.id AND w.status = 'pending'),
       count(*) OVER ()
FROM blocked b
ORDER BY b.id
LIMIT $1`

	listSQL = `SELECT ` + eventColumns + ` FROM {t} WHERE ` + filterSQL + ` ORDER BY id LIMIT $8`

	// selectForChangeSQL is a dry run's selection and the locked selection of
	// a change; $9 are the statuses the action applies to.
	selectForChangeSQL = `SELECT ` + eventColumns + ` FROM {t} WHERE ` + filterSQL +
		` AND status::text = ANY($9) ORDER BY id LIMIT $8`

	retrySQL = `
UPDATE {t} SET status = 'pending', attempts = 0, available_at = now()
WHERE id = ANY($1) AND status = 'failed'`

	ackSQL = `DELETE FROM {t} WHERE id = ANY($1) AND status IN ('failed', 'skipped')`

	// recordJobSQL records a finished operator action. $1 kind, $2 owner,
	// $3 params, $4 result.
	recordJobSQL = `
INSERT INTO {job} (job_kind, state, owner, params, result, started_at, heartbeat_at, finished_at)
VALUES ($1, 'succeeded', $2, $3, $4 || jsonb_build_object('db_user', current_user), now(), now(), now())
RETURNING id`
)

type adminQueries struct {
	statusCounts, blocked, list, selectForChange, retry, ack, recordJob, notify string
	channel                                                                     string
}

func newAdminQueries(schema string) adminQueries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("{t}", s+".aa_outbox_event", "{job}", s+".aa_job")
	return adminQueries{
		statusCounts:    r.Replace(statusCountsSQL),
		blocked:         r.Replace(blockedSQL),
		list:            r.Replace(listSQL),
		selectForChange: r.Replace(selectForChangeSQL),
		retry:           r.Replace(retrySQL),
		ack:             r.Replace(ackSQL),
		recordJob:       r.Replace(recordJobSQL),
		notify:          `SELECT pg_notify($1, '')`,
		channel:         Channel(schema),
	}
}

// Admin runs the operator queries on the outbox of one schema.
type Admin struct {
	schema string
	q      adminQueries
}

// NewAdmin returns the operator queries for schema (default "mdm").
func NewAdmin(schema string) *Admin {
	schema = cmp.Or(schema, "mdm")
	return &Admin{schema: schema, q: newAdminQueries(schema)}
}

// StatusReport is the state of the outbox.
type StatusReport struct {
	At       time.Time        `json:"at"`
	Total    int64            `json:"total"`
	ByStatus map[Status]int64 `json:"by_status"`
	// AggregateTypes has one entry per aggregate_type, by name.
	AggregateTypes []TypeCounts `json:"aggregate_types"`
	// OldestPending is the created_at of the oldest pending event (nil when
	// none is pending) and OldestPendingAge its age in seconds.
	OldestPending    *time.Time `json:"oldest_pending"`
	OldestPendingAge float64    `json:"oldest_pending_age_seconds"`
	// Blocked lists blocked aggregates, oldest head first (at most the
	// number asked for); BlockedCount counts all of them.
	Blocked      []BlockedAggregate `json:"blocked"`
	BlockedCount int64              `json:"blocked_count"`
}

// TypeCounts are the counts of one aggregate_type.
type TypeCounts struct {
	AggregateType    string           `json:"aggregate_type"`
	ByStatus         map[Status]int64 `json:"by_status"`
	OldestPending    *time.Time       `json:"oldest_pending"`
	OldestPendingAge float64          `json:"oldest_pending_age_seconds"`
}

// BlockedAggregate is an aggregate whose head event is failed or backing off.
type BlockedAggregate struct {
	AggregateType string    `json:"aggregate_type"`
	AggregateID   uuid.UUID `json:"aggregate_id"`
	HeadID        int64     `json:"head_id"`
	HeadEventType string    `json:"head_event_type"`
	Status        Status    `json:"status"`
	Attempts      int       `json:"attempts"`
	LastError     *string   `json:"last_error"`
	AvailableAt   time.Time `json:"available_at"`
	// Waiting counts the pending events behind the head.
	Waiting int64 `json:"waiting"`
}

// Status counts events by status and aggregate_type and lists up to
// maxBlocked blocked aggregates (default 50).
func (a *Admin) Status(ctx context.Context, db DB, maxBlocked int) (*StatusReport, error) {
	maxBlocked = cmp.Or(maxBlocked, 50)
	rep := &StatusReport{ByStatus: map[Status]int64{}, Blocked: []BlockedAggregate{}, AggregateTypes: []TypeCounts{}}
	for _, s := range []Status{StatusPending, StatusDispatched, StatusFailed, StatusSkipped} {
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
			rep.AggregateTypes = append(rep.AggregateTypes, TypeCounts{AggregateType: atype, ByStatus: map[Status]int64{}})
		}
		tc := &rep.AggregateTypes[len(rep.AggregateTypes)-1]
		tc.ByStatus[Status(status)] = n
		rep.ByStatus[Status(status)] += n
		rep.Total += n
		if Status(status) == StatusPending {
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
	rows, err = db.Query(ctx, a.q.blocked, maxBlocked)
	if err != nil {
		return nil, fmt.Errorf("outbox: blocked aggregates in %s.aa_outbox_event: %w", a.schema, err)
	}
	rep.Blocked, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (BlockedAggregate, error) {
		var b BlockedAggregate
		var st string
		err := row.Scan(&b.AggregateType, &b.AggregateID, &b.HeadID, &b.HeadEventType, &st, &b.Attempts, &b.LastError, &b.AvailableAt, &b.Waiting, &rep.BlockedCount)
		b.Status = Status(st)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: blocked aggregates in %s.aa_outbox_event: %w", a.schema, err)
	}
	if rep.Blocked == nil {
		rep.Blocked = []BlockedAggregate{}
	}
	return rep, nil
}

// List returns the events the filter selects, by id. A zero Limit means 100.
func (a *Admin) List(ctx context.Context, db DB, f Filter) ([]Event, error) {
	f.Limit = cmp.Or(f.Limit, 100)
	rows, err := db.Query(ctx, a.q.list, f.args()...)
	if err != nil {
		return nil, fmt.Errorf("outbox: list events in %s.aa_outbox_event: %w", a.schema, err)
	}
	evs, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("outbox: list events in %s.aa_outbox_event: %w", a.schema, err)
	}
	return evs, nil
}

func scanEvent(row pgx.CollectableRow) (Event, error) {
	var e Event
	var st string
	err := row.Scan(&e.ID, &e.TenantID, &e.EventType, &e.SchemaVersion, &e.AggregateType, &e.AggregateID, &e.AuditLogID,
		&e.CorrelationID, &e.Payload, &st, &e.Attempts, &e.LastError, &e.AvailableAt, &e.DispatchedAt, &e.CreatedAt, &e.CreatedBy)
	e.Status = Status(st)
	return e, err
}

// ChangeOptions say how a retry or ack runs.
type ChangeOptions struct {
	// DryRun selects and reports, changing nothing (no aa_job row either).
	DryRun bool
	// All allows a selection without ids or a narrowing filter.
	All bool
	// By names the operator in aa_job.owner and the result. Required unless
	// DryRun.
	By string
	// Note is free text recorded with the action (why).
	Note string
}

// Change is what a retry or ack did (or, in a dry run, would do).
type Change struct {
	Action string  `json:"action"` // retry or ack
	DryRun bool    `json:"dry_run"`
	Count  int     `json:"count"`
	Events []Event `json:"events"`
	// JobID is the aa_job row that records the change (0 in a dry run or
	// when nothing matched).
	JobID int64 `json:"job_id,omitempty"`
}

// Retry moves the selected failed events back to pending with attempts 0
// and available_at now() (see the package documentation above).
func (a *Admin) Retry(ctx context.Context, db DB, f Filter, opts ChangeOptions) (*Change, error) {
	for _, s := range f.Statuses {
		if s != StatusFailed {
			return nil, fmt.Errorf("outbox: retry applies to failed events only, not %s", s)
		}
	}
	return a.change(ctx, db, "retry", JobKindRetry, a.q.retry, []string{string(StatusFailed)}, f, opts)
}

// Ack acknowledges the selected failed and skipped events: they are deleted
// and the acknowledgement is recorded in aa_job (see the package
// documentation above).
func (a *Admin) Ack(ctx context.Context, db DB, f Filter, opts ChangeOptions) (*Change, error) {
	statuses := []string{string(StatusFailed), string(StatusSkipped)}
	if len(f.Statuses) > 0 {
		statuses = nil
		for _, s := range f.Statuses {
			if s != StatusFailed && s != StatusSkipped {
				return nil, fmt.Errorf("outbox: ack applies to failed and skipped events only, not %s", s)
			}
			statuses = append(statuses, string(s))
		}
	}
	return a.change(ctx, db, "ack", JobKindAck, a.q.ack, statuses, f, opts)
}

func (a *Admin) change(ctx context.Context, db DB, action, kind, stmt string, statuses []string, f Filter, opts ChangeOptions) (*Change, error) {
	if !f.Narrows() && !opts.All {
		return nil, ErrNoSelection
	}
	if !opts.DryRun && strings.TrimSpace(opts.By) == "" {
		return nil, fmt.Errorf("outbox: %s: say who acts (By)", action)
	}
	args := append(f.args(), statuses)
	ch := &Change{Action: action, DryRun: opts.DryRun}
	if opts.DryRun {
		rows, err := db.Query(ctx, a.q.selectForChange, args...)
		if err != nil {
			return nil, fmt.Errorf("outbox: %s (dry run): select events: %w", action, err)
		}
		if ch.Events, err = pgx.CollectRows(rows, scanEvent); err != nil {
			return nil, fmt.Errorf("outbox: %s (dry run): select events: %w", action, err)
		}
		ch.Count = len(ch.Events)
		return ch, nil
	}

	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, a.q.selectForChange+" FOR UPDATE", args...)
		if err != nil {
			return fmt.Errorf("select events: %w", err)
		}
		if ch.Events, err = pgx.CollectRows(rows, scanEvent); err != nil {
			return fmt.Errorf("select events: %w", err)
		}
		ch.Count = len(ch.Events)
		if ch.Count == 0 {
			return nil
		}
		ids := make([]int64, len(ch.Events))
		for i, e := range ch.Events {
			ids[i] = e.ID
		}
		tag, err := tx.Exec(ctx, stmt, ids)
		if err != nil {
			return fmt.Errorf("%s %d events: %w", action, len(ids), err)
		}
		if int(tag.RowsAffected()) != len(ids) {
			return fmt.Errorf("%s: %d of %d locked events changed; nothing done", action, tag.RowsAffected(), len(ids))
		}
		params, _ := json.Marshal(auditParams(f, statuses, opts))
		result, _ := json.Marshal(auditResult(ch.Events, opts))
		if err := tx.QueryRow(ctx, a.q.recordJob, kind, opts.By, params, result).Scan(&ch.JobID); err != nil {
			return fmt.Errorf("record the %s in aa_job: %w", action, err)
		}
		// Wake the relays: a retried event is due now; an acknowledged head
		// unblocks its aggregate.
		if _, err := tx.Exec(ctx, a.q.notify, a.q.channel); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: %s in %s: %w", action, a.schema, err)
	}
	if action == "retry" {
		// Report the rows as they are now.
		for i := range ch.Events {
			ch.Events[i].Status, ch.Events[i].Attempts = StatusPending, 0
		}
	}
	return ch, nil
}

func auditParams(f Filter, statuses []string, opts ChangeOptions) map[string]any {
	p := map[string]any{"statuses": statuses}
	if len(f.IDs) > 0 {
		p["ids"] = f.IDs
	}
	if f.EventType != "" {
		p["event_type"] = f.EventType
	}
	if f.AggregateType != "" {
		p["aggregate_type"] = f.AggregateType
	}
	if f.AggregateID != nil {
		p["aggregate_id"] = f.AggregateID
	}
	if !f.Since.IsZero() {
		p["since"] = f.Since
	}
	if !f.Until.IsZero() {
		p["until"] = f.Until
	}
	if f.Limit > 0 {
		p["limit"] = f.Limit
	}
	if opts.All {
		p["all"] = true
	}
	return p
}

// auditEvent is one event described in an aa_job result.
type auditEvent struct {
	ID            int64      `json:"id"`
	Status        Status     `json:"status"`
	EventType     string     `json:"event_type"`
	AggregateType string     `json:"aggregate_type"`
	AggregateID   *uuid.UUID `json:"aggregate_id"`
	Attempts      int        `json:"attempts"`
	LastError     *string    `json:"last_error"`
	CreatedAt     time.Time  `json:"created_at"`
}

func auditResult(evs []Event, opts ChangeOptions) map[string]any {
	ids := make([]int64, len(evs))
	byType := map[string]int{}
	details := make([]auditEvent, 0, min(len(evs), maxAuditDetails))
	for i, e := range evs {
		ids[i] = e.ID
		byType[e.EventType]++
		if i < maxAuditDetails {
			details = append(details, auditEvent{e.ID, e.Status, e.EventType, e.AggregateType, e.AggregateID, e.Attempts, e.LastError, e.CreatedAt})
		}
	}
	slices.Sort(ids)
	r := map[string]any{
		"count": len(evs), "by": opts.By, "ids": ids, "event_types": byType, "events": details,
	}
	if len(evs) > maxAuditDetails {
		r["events_truncated"] = true
	}
	if opts.Note != "" {
		r["note"] = opts.Note
	}
	return r
}
