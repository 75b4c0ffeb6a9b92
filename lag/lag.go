// Package lag measures how far behind the consumers and indexes are, from the
// outbox itself: the backlog and the age of the oldest undelivered event per
// aggregate_type and per consumer (through the configured routes), blocked
// aggregates, failures with their last errors, and the delivery rate. The
// relay's dashboard, its Prometheus metrics and `searchsync status` all read
// the same Snapshot, so they agree.
//
// Pending figures come through the partial index ix_outbox_event_pending,
// failed ones through the relay's ix_outbox_event_failed: a snapshot reads only
// undelivered rows, however long the delivered history is.
package lag

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/internal/config"
)

// Snapshot is the state of the outbox at one moment.
type Snapshot struct {
	At time.Time `json:"at"`
	// Pending counts every pending event; Ready those whose available_at has
	// come; Failed the failed ones.
	Pending int64 `json:"pending"`
	Ready   int64 `json:"ready"`
	Failed  int64 `json:"failed"`
	// OldestPendingAge is now - created_at of the oldest pending event (0
	// when none): the lag of the slowest consumer.
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	// LastID is the newest event id (the sequence's last value).
	LastID int64 `json:"last_id"`
	// DeliveredRate is events handled (dispatched or skipped) per second
	// since the previous snapshot of the same Sampler; 0 for the first.
	DeliveredRate float64 `json:"delivered_per_second"`

	AggregateTypes []AggregateTypeLag `json:"aggregate_types"`
	Consumers      []ConsumerLag      `json:"consumers"`
	Blocked        []Blocked          `json:"blocked"`
	BlockedCount   int64              `json:"blocked_count"`
	Failures       []Failure          `json:"failures"`
}

// AggregateTypeLag is the backlog of one aggregate_type.
type AggregateTypeLag struct {
	AggregateType    string  `json:"aggregate_type"`
	Pending          int64   `json:"pending"`
	Failed           int64   `json:"failed"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
}

// ConsumerLag is the backlog of one consumer: the pending and failed events
// its routes select.
type ConsumerLag struct {
	Name             string   `json:"name"`
	Type             string   `json:"type"`
	Indexes          []string `json:"indexes,omitempty"`
	Pending          int64    `json:"pending"`
	Failed           int64    `json:"failed"`
	OldestPendingAge float64  `json:"oldest_pending_age_seconds"`
}

// Blocked is an aggregate whose head event is failed or waiting for a retry:
// nothing after it is delivered until it is.
type Blocked struct {
	AggregateType string    `json:"aggregate_type"`
	AggregateID   uuid.UUID `json:"aggregate_id"`
	HeadID        int64     `json:"head_id"`
	Status        string    `json:"status"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"last_error"`
	AvailableAt   time.Time `json:"available_at"`
	Waiting       int64     `json:"waiting"` // events behind the head
}

// Failure is one failed event.
type Failure struct {
	ID            int64      `json:"id"`
	EventType     string     `json:"event_type"`
	AggregateType string     `json:"aggregate_type"`
	AggregateID   *uuid.UUID `json:"aggregate_id"`
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error"`
	CreatedAt     time.Time  `json:"created_at"`
}

// Reader runs the lag queries for one schema and set of consumers.
type Reader struct {
	pool      *pgxpool.Pool
	q         queries
	consumers []config.Consumer
	routes    []config.Route
	// MaxListed bounds the blocked aggregates and failures listed. Default 20.
	MaxListed int
}

// NewReader returns a Reader; consumers and routes come from the configuration.
func NewReader(pool *pgxpool.Pool, schema string, consumers []config.Consumer, routes []config.Route) *Reader {
	return &Reader{pool: pool, q: newQueries(schema), consumers: consumers, routes: routes, MaxListed: 20}
}

// group is one (aggregate_type, event_type) row of the grouped queries.
type group struct {
	aggregateType, eventType string
	pending, ready, failed   int64
	oldest                   *time.Time
}

// Pending reads the pending figures (cheap: the partial pending index).
func (r *Reader) pending(ctx context.Context, s *Snapshot) ([]group, error) {
	rows, err := r.pool.Query(ctx, r.q.pendingGroups)
	if err != nil {
		return nil, fmt.Errorf("lag: pending backlog: %w", err)
	}
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (group, error) {
		var g group
		return g, row.Scan(&g.aggregateType, &g.eventType, &g.pending, &g.ready, &g.oldest)
	})
	if err != nil {
		return nil, fmt.Errorf("lag: pending backlog: %w", err)
	}
	if err := r.pool.QueryRow(ctx, r.q.lastID).Scan(&s.LastID); err != nil {
		return nil, fmt.Errorf("lag: last id: %w", err)
	}
	return groups, nil
}

// failed reads the failed figures, blocked aggregates and recent failures
// (through ix_outbox_event_failed).
func (r *Reader) failed(ctx context.Context, s *Snapshot) ([]group, error) {
	rows, err := r.pool.Query(ctx, r.q.failedGroups)
	if err != nil {
		return nil, fmt.Errorf("lag: failed events: %w", err)
	}
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (group, error) {
		var g group
		return g, row.Scan(&g.aggregateType, &g.eventType, &g.failed)
	})
	if err != nil {
		return nil, fmt.Errorf("lag: failed events: %w", err)
	}
	rows, err = r.pool.Query(ctx, r.q.blocked, r.MaxListed)
	if err != nil {
		return nil, fmt.Errorf("lag: blocked aggregates: %w", err)
	}
	s.Blocked, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Blocked, error) {
		var b Blocked
		return b, row.Scan(&b.AggregateType, &b.AggregateID, &b.HeadID, &b.Status, &b.Attempts, &b.LastError, &b.AvailableAt, &b.Waiting, &s.BlockedCount)
	})
	if err != nil {
		return nil, fmt.Errorf("lag: blocked aggregates: %w", err)
	}
	rows, err = r.pool.Query(ctx, r.q.failures, r.MaxListed)
	if err != nil {
		return nil, fmt.Errorf("lag: failures: %w", err)
	}
	s.Failures, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Failure, error) {
		var f Failure
		return f, row.Scan(&f.ID, &f.EventType, &f.AggregateType, &f.AggregateID, &f.Attempts, &f.LastError, &f.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("lag: failures: %w", err)
	}
	return groups, nil
}

// Read takes a whole snapshot now.
func (r *Reader) Read(ctx context.Context) (*Snapshot, error) {
	s := &Snapshot{}
	if err := r.pool.QueryRow(ctx, `SELECT now()`).Scan(&s.At); err != nil {
		return nil, fmt.Errorf("lag: %w", err)
	}
	pg, err := r.pending(ctx, s)
	if err != nil {
		return nil, err
	}
	fg, err := r.failed(ctx, s)
	if err != nil {
		return nil, err
	}
	r.summarize(s, pg, fg)
	return s, nil
}

// summarize fills the totals, per aggregate_type and per consumer figures.
func (r *Reader) summarize(s *Snapshot, pending, failed []group) {
	age := func(t *time.Time) float64 {
		if t == nil {
			return 0
		}
		return max(0, s.At.Sub(*t).Seconds())
	}
	byType := map[string]*AggregateTypeLag{}
	typ := func(name string) *AggregateTypeLag {
		if a, ok := byType[name]; ok {
			return a
		}
		a := &AggregateTypeLag{AggregateType: name}
		byType[name] = a
		return a
	}
	cons := make([]ConsumerLag, len(r.consumers))
	for i, c := range r.consumers {
		cons[i] = ConsumerLag{Name: c.Name, Type: c.Type}
		if c.Search != nil {
			cons[i].Indexes = c.Search.Indexes
		}
	}
	s.Pending, s.Ready, s.Failed, s.OldestPendingAge = 0, 0, 0, 0
	for _, g := range pending {
		s.Pending += g.pending
		s.Ready += g.ready
		a := typ(g.aggregateType)
		a.Pending += g.pending
		ga := age(g.oldest)
		a.OldestPendingAge = max(a.OldestPendingAge, ga)
		s.OldestPendingAge = max(s.OldestPendingAge, ga)
		for i := range cons {
			if r.routed(cons[i].Name, g.eventType, g.aggregateType) {
				cons[i].Pending += g.pending
				cons[i].OldestPendingAge = max(cons[i].OldestPendingAge, ga)
			}
		}
	}
	for _, g := range failed {
		s.Failed += g.failed
		typ(g.aggregateType).Failed += g.failed
		for i := range cons {
			if r.routed(cons[i].Name, g.eventType, g.aggregateType) {
				cons[i].Failed += g.failed
			}
		}
	}
	s.AggregateTypes = s.AggregateTypes[:0]
	for _, a := range byType {
		s.AggregateTypes = append(s.AggregateTypes, *a)
	}
	sort.Slice(s.AggregateTypes, func(i, j int) bool { return s.AggregateTypes[i].AggregateType < s.AggregateTypes[j].AggregateType })
	s.Consumers = cons
}

// routed reports whether any route sends this kind of event to the consumer.
func (r *Reader) routed(consumer, eventType, aggregateType string) bool {
	for _, rt := range r.routes {
		if rt.Consumer == consumer && rt.Matches(eventType, aggregateType) {
			return true
		}
	}
	return false
}

// ConsumersOf lists the names of the consumers an event type goes to.
func (r *Reader) ConsumersOf(eventType, aggregateType string) []string {
	var out []string
	for _, c := range r.consumers {
		if r.routed(c.Name, eventType, aggregateType) {
			out = append(out, c.Name)
		}
	}
	return out
}

type queries struct {
	pendingGroups, lastID, failedGroups, blocked, failures string
}

func newQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("{t}", s+".aa_outbox_event", "{seq}", s+".aa_outbox_event_id_seq")
	return queries{
		pendingGroups: r.Replace(`
			SELECT aggregate_type, event_type, count(*), count(*) FILTER (WHERE available_at <= now()), min(created_at)
			FROM {t} WHERE status = 'pending'
			GROUP BY aggregate_type, event_type`),
		lastID: r.Replace(`SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {seq}`),
		failedGroups: r.Replace(`
			SELECT aggregate_type, event_type, count(*)
			FROM {t} WHERE status = 'failed'
			GROUP BY aggregate_type, event_type`),
		// The head of an aggregate is its first event that is neither
		// dispatched nor skipped; it blocks when failed or backing off.
		blocked: r.Replace(`
			WITH heads AS (
				SELECT DISTINCT ON (aggregate_type, aggregate_id)
				       aggregate_type, aggregate_id, id, status::text AS status, attempts,
				       coalesce(last_error, '') AS last_error, available_at
				FROM {t}
				WHERE status IN ('pending', 'failed') AND aggregate_id IS NOT NULL
				ORDER BY aggregate_type, aggregate_id, id),
			b AS (SELECT * FROM heads WHERE status = 'failed' OR available_at > now())
			SELECT b.aggregate_type, b.aggregate_id, b.id, b.status, b.attempts, b.last_error, b.available_at,
			       (SELECT count(*) FROM {t} w WHERE w.aggregate_type = b.aggregate_type AND w.aggregate_id = b.aggregate_id
			            AND w.id > b.id AND w.status = 'pending'),
			       count(*) OVER ()
			FROM b ORDER BY b.id LIMIT $1`),
		failures: r.Replace(`
			SELECT id, event_type, aggregate_type, aggregate_id, attempts, coalesce(last_error, ''), created_at
			FROM {t} WHERE status = 'failed' ORDER BY id DESC LIMIT $1`),
	}
}
