// Package lag measures how far behind the consumers and indexes are, from the
// outbox itself. The relay's dashboard, its Prometheus metrics and
// `searchsync status` all read the same Snapshot, so they agree.
//
// Lag separates "behind" from "stuck" (docs/lag.md). Per consumer (and so per
// index of a search consumer) a Snapshot holds:
//   - the deliverable lag and backlog: the age of the oldest event the
//     consumer could be given now, and how many there are (docs/consumers.md,
//     "What a consumer may be given"): pending, routed to it, no delivery row
//     for it or a pending one whose available_at has come, not behind a blocker
//     of its aggregate for it, and the consumer not paused;
//   - blocked, by cause: failed (aggregates whose head for the consumer is
//     parked), backing_off (the head waits for its own retry) and paused (the
//     consumer is paused: everything it could otherwise be given), each with
//     how many aggregates and events, since when and why;
//   - failed: events parked for it;
//   - its pause state (aa_outbox_consumer).
//
// One poison event therefore shows as blocked{cause=failed} = 1 while the
// deliverable lag stays at the age of the fresh events.
//
// Delivery rows exist only for events whose consumers went different ways,
// and then for every routed consumer (docs/consumers.md): an event with open
// rows (pending or failed) is owed by the consumers that have one, and a
// routed consumer without an open row has it. The age of a group of delivery
// rows is that of its first event by id, which differs from the oldest
// created_at only by the producers' transaction times.
//
// Every query reads undelivered rows only: pending events through the
// partial indexes ix_outbox_event_pending / ix_outbox_event_claimable (one
// grouped pass; only the events of blocked aggregates are labelled one by
// one, through the aggregate index from their first head on), failed ones
// through ix_outbox_event_failed, open delivery rows through
// ix_outbox_delivery_open / ix_outbox_delivery_consumer. The queries of one snapshot run in one
// read-only REPEATABLE READ transaction, so their figures agree with each
// other and share one now().
package lag

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/routing"
)

// Causes of a blocked consumer.
const (
	CauseFailed     = "failed"
	CauseBackingOff = "backing_off"
	CausePaused     = "paused"
)

// Causes lists the causes in the order they are shown.
var Causes = []string{CauseFailed, CauseBackingOff, CausePaused}

// Snapshot is the state of the outbox at one moment.
type Snapshot struct {
	At time.Time `json:"at"`
	// Pending counts every pending event; Ready those whose available_at has
	// come; Failed the failed ones.
	Pending int64 `json:"pending"`
	Ready   int64 `json:"ready"`
	Failed  int64 `json:"failed"`
	// OldestPendingAge is now - created_at of the oldest pending event (0
	// when none), whatever holds it: it grows without bound behind a failed
	// head. DeliverableLag is the figure to alert on.
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	// DeliverableLag is the highest deliverable lag of the consumers: the age
	// of the oldest event some running consumer could be given now.
	DeliverableLag float64 `json:"deliverable_lag_seconds"`
	// LastID is the newest event id (the sequence's last value).
	LastID int64 `json:"last_id"`
	// DeliveredRate is events handled (dispatched or skipped) per second
	// by all relays over the whole seconds [RateFrom, RateUntil): since the
	// previous snapshot of the same Sampler, the last ten seconds for the
	// first. The relays' acks count them (aa_consumer_throughput) in the
	// statement that sets dispatched_at, so the figure is the outbox's
	// own count of the events dispatched or skipped in the window.
	DeliveredRate float64   `json:"delivered_per_second"`
	RateFrom      time.Time `json:"rate_from"`
	RateUntil     time.Time `json:"rate_until"`
	// Delivered counts, per consumer ("*": handled by the outbox), the
	// events delivered from the Sampler's first window up to
	// CountedUntil; the console's history takes its rates from the
	// difference of two snapshots.
	Delivered    map[string]int64 `json:"-"`
	CountedUntil time.Time        `json:"-"`

	AggregateTypes []AggregateTypeLag `json:"aggregate_types"`
	Consumers      []ConsumerLag      `json:"consumers"`
	// Blocked lists blocking heads (at most Reader.MaxListed, oldest id
	// first); BlockedCount counts the aggregates that have one.
	Blocked      []Blocked `json:"blocked"`
	BlockedCount int64     `json:"blocked_count"`
	Failures     []Failure `json:"failures"`
	// OutOfOrder is the events the relays delivered after a later event
	// of their aggregate (aa_outbox_overtaken).
	OutOfOrder OutOfOrder `json:"out_of_order"`
	// Relays is the relay instances alive (heartbeating) now.
	Relays Relays `json:"relays"`
	// Health is the verdict on the whole: healthy, degraded or down, with
	// its reasons (lag/health.go).
	Health Health `json:"health"`
}

// Relays counts the relay instances whose heartbeat has not expired
// (aa_relay_instance), with the newest heartbeat of any instance (nil when
// none ever ran). With none live, no consumer is delivering: its State
// says "no live relay".
type Relays struct {
	Live          int        `json:"live"`
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
}

// StateNoRelay is a consumer's State when no relay instance is alive.
const StateNoRelay = "no live relay"

// OutOfOrder counts the events delivered out of id order in the last 24
// hours, with the newest one ever recorded (nil when none is): a producer
// commits events without the aggregate's advisory lock (docs/ordering.md).
type OutOfOrder struct {
	Last24h int64            `json:"last_24h"`
	Latest  *OutOfOrderEvent `json:"latest,omitempty"`
}

// OutOfOrderEvent is one event delivered after AfterEventID, a later event
// of its aggregate.
type OutOfOrderEvent struct {
	EventID       int64     `json:"event_id"`
	AfterEventID  int64     `json:"after_event_id"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   uuid.UUID `json:"aggregate_id"`
	DetectedAt    time.Time `json:"detected_at"`
}

// AggregateTypeLag is the backlog of one aggregate_type.
type AggregateTypeLag struct {
	AggregateType    string  `json:"aggregate_type"`
	Pending          int64   `json:"pending"`
	Failed           int64   `json:"failed"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
}

// ConsumerLag is what one consumer owes and why it has not delivered it.
//
// Pending = Deliverable + Blocked.Failed.Events + Blocked.BackingOff.Events +
// Blocked.Paused.Events.
type ConsumerLag struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Indexes []string `json:"indexes,omitempty"`
	// State is running, paused, or StateNoRelay when no relay instance
	// is alive (nothing delivers, whatever the consumer's own state).
	State string `json:"state"`
	// Pending counts the pending events the consumer still has to deliver
	// (deliverable or not); OldestPendingAge is the age of the oldest.
	Pending          int64   `json:"pending"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	// Deliverable counts the events it could be given now; DeliverableLag is
	// the age of the oldest (0 when none).
	Deliverable    int64   `json:"deliverable"`
	DeliverableLag float64 `json:"deliverable_lag_seconds"`
	// DeliveredRate is the events it delivered (answered OK or stale) per
	// second, all relays, over the snapshot's rate window.
	DeliveredRate float64 `json:"delivered_per_second"`
	// Failed counts the events parked for it.
	Failed  int64           `json:"failed"`
	Blocked ConsumerBlocked `json:"blocked"`
	// Paused is set while the consumer is paused.
	Paused *Pause `json:"paused,omitempty"`
	// Health is healthy, degraded (aggregates backing off), failing
	// (failed events), paused or down (no live relay); HealthReason says
	// why when it is not healthy.
	Health       string `json:"health"`
	HealthReason string `json:"health_reason,omitempty"`
}

// ConsumerBlocked splits what a consumer cannot deliver by cause.
type ConsumerBlocked struct {
	Failed     BlockedFigure `json:"failed"`
	BackingOff BlockedFigure `json:"backing_off"`
	Paused     BlockedFigure `json:"paused"`
}

// Cause returns the figure of one cause (see Causes).
func (b *ConsumerBlocked) Cause(cause string) *BlockedFigure {
	switch cause {
	case CauseFailed:
		return &b.Failed
	case CauseBackingOff:
		return &b.BackingOff
	default:
		return &b.Paused
	}
}

// BlockedFigure is one cause of a consumer's blocked backlog.
type BlockedFigure struct {
	// Aggregates counts the blocked aggregates (for paused: the aggregates
	// whose next event it would otherwise be given, an event without an
	// aggregate counting as one).
	Aggregates int64 `json:"aggregates"`
	// Events counts the pending events held: for failed and backing_off the
	// events waiting behind the heads (and the backing-off heads themselves,
	// and backing-off events without an aggregate); for paused what it would
	// otherwise be given.
	Events int64 `json:"events"`
	// Since is the created_at of the oldest blocking head (for paused: when
	// the consumer was paused); Age is now - Since in seconds (0 when none).
	Since *time.Time `json:"since,omitempty"`
	Age   float64    `json:"age_seconds"`
	// HeadID is the oldest blocking head; Why its last_error (for paused: the
	// pause reason), truncated.
	HeadID int64  `json:"head_id,omitempty"`
	Why    string `json:"why,omitempty"`
}

// Pause is the pause state of a consumer (aa_outbox_consumer).
type Pause struct {
	Since   time.Time  `json:"since"`
	Age     float64    `json:"age_seconds"`
	Reason  string     `json:"reason"`
	Probes  int        `json:"probes"`
	ProbeAt *time.Time `json:"probe_at,omitempty"`
}

// Blocked is an aggregate head that holds back the events after it: an event
// without delivery rows that is failed or waiting for a retry (it blocks every
// consumer), or one consumer's delivery row that is (it blocks that consumer).
type Blocked struct {
	AggregateType string    `json:"aggregate_type"`
	AggregateID   uuid.UUID `json:"aggregate_id"`
	HeadID        int64     `json:"head_id"`
	EventType     string    `json:"event_type"`
	// Consumer is the consumer whose delivery row blocks, "" when the event
	// row blocks every consumer. Consumers lists the consumers it holds back.
	Consumer  string   `json:"consumer,omitempty"`
	Consumers []string `json:"consumers"`
	// Status is failed or pending (backing off); Cause failed or backing_off.
	Status      string    `json:"status"`
	Cause       string    `json:"cause"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error"`
	AvailableAt time.Time `json:"available_at"`
	CreatedAt   time.Time `json:"created_at"`
	Waiting     int64     `json:"waiting"` // pending events behind the head
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

// Consumer is what the read model knows of a configured consumer: its
// name, its type and, for a search consumer, the indexes it writes.
type Consumer struct {
	Name    string
	Type    string
	Indexes []string
}

// Reader runs the lag queries for one schema and set of consumers.
type Reader struct {
	pool      *pgxpool.Pool
	q         queries
	consumers []Consumer
	routing   *routing.Table
	// MaxListed bounds the blocked heads and failures listed. Default 20.
	MaxListed int
	// PausedRefresh is how long a paused consumer's count of aggregates
	// (the one figure that reads its whole backlog) is reused. Default 30s.
	PausedRefresh time.Duration

	mu     sync.Mutex
	paused map[string]pausedCount
}

type pausedCount struct {
	at time.Time
	n  int64
}

// NewReader returns a Reader over the consumers and their routes (nil: no
// route), as the configuration maps them (config.LagConsumers,
// Config.Routing).
func NewReader(pool *pgxpool.Pool, schema string, consumers []Consumer, routes *routing.Table) *Reader {
	if routes == nil {
		routes = &routing.Table{}
	}
	return &Reader{pool: pool, q: newQueries(schema), consumers: consumers, routing: routes, MaxListed: 20,
		PausedRefresh: 30 * time.Second, paused: map[string]pausedCount{}}
}

// allConsumers marks a head that blocks every consumer.
const allConsumers = "*"

// head is the first blocker of an aggregate for one consumer (or for all).
type head struct {
	consumer                 string
	aggregateType            string
	aggregateID              uuid.UUID
	id                       int64
	eventType, status, cause string
	attempts                 int
	lastError                string
	availableAt, createdAt   time.Time
	waiting                  map[string]int64 // event_type → pending events behind it
}

// pendingGroup is one group of pending events without open delivery rows
// (split=false) or with them (split=true; their figures come from the
// delivery rows).
type pendingGroup struct {
	aggregateType, eventType string
	ready, split             bool
	blockedFor               []string // consumers held back by an earlier head; "*" = all
	n                        int64
	oldest                   time.Time
}

// rowGroup is one group of open delivery rows of a consumer.
type rowGroup struct {
	consumer, state string
	ready           bool
	blockedFor      []string
	n               int64
	oldest          time.Time
}

// failedGroup is one group of failed events; split ones have delivery rows.
type failedGroup struct {
	aggregateType, eventType string
	split                    bool
	n                        int64
}

type pauseRow struct {
	state, reason string
	pausedAt      *time.Time
	probes        int
	probeAt       *time.Time
}

// raw is what the queries of one snapshot return.
type raw struct {
	heads   []head
	pending []pendingGroup
	rows    []rowGroup
	failed  []failedGroup
	pauses  map[string]pauseRow
}

// Read takes a whole snapshot now, its rates over the last ten seconds.
func (r *Reader) Read(ctx context.Context) (*Snapshot, error) { return r.ReadSince(ctx, time.Time{}) }

// rateSpan is the rate window of a snapshot without a previous one.
const rateSpan = 10 * time.Second

// ReadSince takes a whole snapshot now, its rates over the whole seconds
// from rateFrom (a previous snapshot's RateUntil; zero: the last ten
// seconds) to the last second that has ended.
func (r *Reader) ReadSince(ctx context.Context, rateFrom time.Time) (*Snapshot, error) {
	s := &Snapshot{Blocked: []Blocked{}, Failures: []Failure{}}
	var rw raw
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// JIT compiles for longer than these queries run.
		if err := tx.QueryRow(ctx, `SELECT now(), set_config('jit', 'off', true)`).Scan(&s.At, nil); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, r.q.lastID).Scan(&s.LastID); err != nil {
			return fmt.Errorf("last id: %w", err)
		}
		var err error
		if rw, err = r.query(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, r.q.failures, r.MaxListed)
		if err != nil {
			return fmt.Errorf("failures: %w", err)
		}
		s.Failures, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Failure, error) {
			var f Failure
			err := row.Scan(&f.ID, &f.EventType, &f.AggregateType, &f.AggregateID, &f.Attempts, &f.LastError, &f.CreatedAt)
			f.LastError = Redact(f.LastError, maxError)
			return f, err
		})
		if err != nil {
			return fmt.Errorf("failures: %w", err)
		}
		if err := r.outOfOrder(ctx, tx, s); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, r.q.relays).Scan(&s.Relays.Live, &s.Relays.LastHeartbeat); err != nil {
			return fmt.Errorf("relay instances: %w", err)
		}
		if err := r.delivered(ctx, tx, s, rateFrom); err != nil {
			return err
		}
		r.summarize(s, &rw)
		s.setRates(s.Delivered)
		if err := r.pausedAggregates(ctx, tx, s, &rw); err != nil {
			return err
		}
		s.judge()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lag: %w", err)
	}
	return s, nil
}

// delivered reads the events delivered per consumer ("*": handled by the
// outbox) over [from, until) into s.Delivered: until (s.RateUntil and
// s.CountedUntil) is the start of the second before the one now, so that no
// ack of a second that is counted can still be committing. A zero from (or
// one an hour old) reads the last ten seconds; a from that is until reads
// nothing (an empty window).
func (r *Reader) delivered(ctx context.Context, tx pgx.Tx, s *Snapshot, from time.Time) error {
	if err := tx.QueryRow(ctx, `SELECT date_trunc('second', now()) - interval '1 second'`).Scan(&s.RateUntil); err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	if from.IsZero() || from.After(s.RateUntil) || s.RateUntil.Sub(from) > time.Hour {
		from = s.RateUntil.Add(-rateSpan)
	}
	s.RateFrom, s.CountedUntil, s.Delivered = from, s.RateUntil, map[string]int64{}
	rows, err := tx.Query(ctx, r.q.throughput, from, s.RateUntil)
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	var name string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		s.Delivered[name] = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	return nil
}

// setRates sets the delivered rates from counts over [RateFrom, RateUntil).
func (s *Snapshot) setRates(counts map[string]int64) {
	secs := s.RateUntil.Sub(s.RateFrom).Seconds()
	if secs <= 0 {
		return
	}
	s.DeliveredRate = float64(counts["*"]) / secs
	for i := range s.Consumers {
		s.Consumers[i].DeliveredRate = float64(counts[s.Consumers[i].Name]) / secs
	}
}

// outOfOrder reads the out-of-order deliveries the relays recorded.
func (r *Reader) outOfOrder(ctx context.Context, tx pgx.Tx, s *Snapshot) error {
	var e OutOfOrderEvent
	var id *int64
	err := tx.QueryRow(ctx, r.q.outOfOrder).Scan(&s.OutOfOrder.Last24h, &id, &e.AfterEventID, &e.AggregateType, &e.AggregateID, &e.DetectedAt)
	if err != nil {
		return fmt.Errorf("out-of-order deliveries: %w", err)
	}
	if id != nil {
		e.EventID = *id
		s.OutOfOrder.Latest = &e
	}
	return nil
}

// query runs the heads, pending, delivery-row, failed and pause queries.
func (r *Reader) query(ctx context.Context, tx pgx.Tx) (raw, error) {
	var rw raw
	rows, err := tx.Query(ctx, r.q.heads)
	if err != nil {
		return rw, fmt.Errorf("blocked heads: %w", err)
	}
	rw.heads, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (head, error) {
		var h head
		return h, row.Scan(&h.consumer, &h.aggregateType, &h.aggregateID, &h.id, &h.eventType, &h.status, &h.cause,
			&h.attempts, &h.lastError, &h.availableAt, &h.createdAt, &h.waiting)
	})
	if err != nil {
		return rw, fmt.Errorf("blocked heads: %w", err)
	}
	args := headArgs(rw.heads)

	rows, err = tx.Query(ctx, r.q.pending, args...)
	if err != nil {
		return rw, fmt.Errorf("pending backlog: %w", err)
	}
	rw.pending, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (pendingGroup, error) {
		var g pendingGroup
		return g, row.Scan(&g.aggregateType, &g.eventType, &g.ready, &g.split, &g.blockedFor, &g.n, &g.oldest)
	})
	if err != nil {
		return rw, fmt.Errorf("pending backlog: %w", err)
	}

	rows, err = tx.Query(ctx, r.q.deliveryRows, args...)
	if err != nil {
		return rw, fmt.Errorf("delivery rows: %w", err)
	}
	rw.rows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (rowGroup, error) {
		var g rowGroup
		return g, row.Scan(&g.consumer, &g.state, &g.ready, &g.blockedFor, &g.n, &g.oldest)
	})
	if err != nil {
		return rw, fmt.Errorf("delivery rows: %w", err)
	}

	rows, err = tx.Query(ctx, r.q.failedGroups)
	if err != nil {
		return rw, fmt.Errorf("failed events: %w", err)
	}
	rw.failed, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (failedGroup, error) {
		var g failedGroup
		return g, row.Scan(&g.aggregateType, &g.eventType, &g.split, &g.n)
	})
	if err != nil {
		return rw, fmt.Errorf("failed events: %w", err)
	}

	rows, err = tx.Query(ctx, r.q.pauses)
	if err != nil {
		return rw, fmt.Errorf("consumer states: %w", err)
	}
	rw.pauses = map[string]pauseRow{}
	var name string
	var p pauseRow
	_, err = pgx.ForEachRow(rows, []any{&name, &p.state, &p.pausedAt, &p.reason, &p.probes, &p.probeAt}, func() error {
		rw.pauses[name] = p
		return nil
	})
	if err != nil {
		return rw, fmt.Errorf("consumer states: %w", err)
	}
	return rw, nil
}

// headArgs are the heads as the $1..$4 arrays of the pending and
// delivery-row queries.
func headArgs(heads []head) []any {
	types := make([]string, len(heads))
	ids := make([]uuid.UUID, len(heads))
	cons := make([]string, len(heads))
	hids := make([]int64, len(heads))
	for i, h := range heads {
		types[i], ids[i], cons[i], hids[i] = h.aggregateType, h.aggregateID, h.consumer, h.id
	}
	return []any{types, ids, cons, hids}
}

// blocks reports whether an event held back for blockedFor is held back for
// the consumer.
func blocks(blockedFor []string, consumer string) bool {
	return slices.Contains(blockedFor, allConsumers) || slices.Contains(blockedFor, consumer)
}

// pausedAggregates counts, for each paused consumer with events it would
// otherwise be given, the aggregates of those events (one query per paused
// consumer, only while one is, at most every PausedRefresh).
func (r *Reader) pausedAggregates(ctx context.Context, tx pgx.Tx, s *Snapshot, rw *raw) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range s.Consumers {
		cl := &s.Consumers[i]
		if cl.Paused == nil || cl.Blocked.Paused.Events == 0 {
			delete(r.paused, cl.Name)
			continue
		}
		if c, ok := r.paused[cl.Name]; ok && s.At.Sub(c.at) < r.PausedRefresh && !c.at.After(s.At) {
			cl.Blocked.Paused.Aggregates = min(c.n, cl.Blocked.Paused.Events)
			continue
		}
		var types, events []string
		seen := map[[2]string]bool{}
		for _, g := range rw.pending {
			k := [2]string{g.aggregateType, g.eventType}
			if !g.split && !seen[k] && r.routed(cl.Name, g.eventType, g.aggregateType) {
				seen[k] = true
				types, events = append(types, g.aggregateType), append(events, g.eventType)
			}
		}
		args := append(headArgs(rw.heads), types, events, cl.Name)
		if err := tx.QueryRow(ctx, r.q.pausedAggregates, args...).Scan(&cl.Blocked.Paused.Aggregates); err != nil {
			return fmt.Errorf("paused aggregates of %s: %w", cl.Name, err)
		}
		r.paused[cl.Name] = pausedCount{at: s.At, n: cl.Blocked.Paused.Aggregates}
	}
	return nil
}

// routed reports whether any route sends this kind of event to the consumer.
func (r *Reader) routed(consumer, eventType, aggregateType string) bool {
	return r.routing.Routed(consumer, eventType, aggregateType)
}

// ConsumersOf lists the names of the consumers an event type goes to.
func (r *Reader) ConsumersOf(eventType, aggregateType string) []string {
	return r.routing.To(eventType, aggregateType)
}

// maxError is how many characters of a last_error or pause reason a
// Snapshot keeps (after Redact: the dashboard serves them).
const maxError = 200

// Truncate shortens s to at most n runes, marking a cut with "…".
func Truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(0, n-1)]) + "…"
}

var (
	urlUserinfo = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)[^/\s@]*@`)
	urlQuery    = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://[^\s?#]*)[?#][^\s"']*`)
	secretPair  = regexp.MustCompile(`(?i)\b(authorization|password|passwd|secret|token|api[_-]?key|apikey)(\s*[:=]\s*)(?:(?:bearer|basic)\s+)?\S+`)
	authScheme  = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/-]+=*`)
)

// Redact removes what may be a secret from an error message (the userinfo
// and query of URLs, credentials after a key word) and truncates it to n
// runes: the pause reason becomes a metric label.
func Redact(s string, n int) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}")
	s = urlQuery.ReplaceAllString(s, "${1}")
	s = secretPair.ReplaceAllString(s, "${1}${2}[redacted]")
	s = authScheme.ReplaceAllString(s, "${1} [redacted]")
	return Truncate(s, n)
}
