package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/searchsync/searchsync/outbox"
)

// scanEvents reads a claim's rows (at most size). Room for hint rows (the
// previous claim's count, at least 256) is made at once: a short claim of a
// large size costs little, and a backlog's claims do not grow their slice
// row by row.
//
// It allocates little per row, as it runs for every event: the scan
// targets are declared once (passed to Scan as interfaces, each would
// escape to the heap per row), the uuids come from slabs, and the event
// and aggregate types and creators, few distinct values, are interned.
func scanEvents(rows pgx.Rows, size, hint int) ([]claimed, error) {
	defer rows.Close()
	out := make([]claimed, 0, min(size, max(256, hint)))
	var (
		part                   int32
		id                     int64
		schemaVersion          int
		auditLogID             *int64
		attempts               int
		lastError              *string
		availableAt, createdAt time.Time
		// The payload as bytes: scanned into a json.RawMessage pgx would
		// run it through json.Unmarshal (a validation the database did).
		payload, deliveries []byte
		// uuids as pgtype.UUID: a *uuid.UUID is scanned through
		// sql.Scanner, from the value formatted as text and parsed back.
		tenant, agg, corr pgtype.UUID
		blocked           []string
		overtaken         *int64
	)
	// Text columns read from RawValues are left out of Scan (nil).
	const eventType, aggregateType, createdBy = 3, 5, 14
	dest := []any{&part, &id, &tenant, nil, &schemaVersion, nil, &agg, &auditLogID, &corr, &payload,
		&attempts, &lastError, &availableAt, &createdAt, nil, &deliveries, &blocked, &overtaken}
	var in interner
	var slab []uuid.UUID
	uuidOf := func(v pgtype.UUID) *uuid.UUID {
		if !v.Valid {
			return nil
		}
		if len(slab) == cap(slab) {
			slab = make([]uuid.UUID, 0, 128)
		}
		slab = append(slab, v.Bytes)
		return &slab[len(slab)-1]
	}
	for rows.Next() {
		// Scan sets every target it is given; these are reset so that a
		// NULL or a fresh slice never shares the previous row's.
		auditLogID, lastError, payload, deliveries, blocked, overtaken = nil, nil, nil, nil, nil, nil
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		raw := rows.RawValues()
		out = append(out, claimed{part: part, blocked: blocked})
		if overtaken != nil {
			out[len(out)-1].overtaken = *overtaken
		}
		ce := &out[len(out)-1]
		e := &ce.ev
		e.ID, e.SchemaVersion, e.AuditLogID, e.Payload = id, schemaVersion, auditLogID, payload
		e.EventType, e.AggregateType, e.CreatedBy = in.of(raw[eventType]), in.of(raw[aggregateType]), in.of(raw[createdBy])
		e.TenantID, e.AggregateID, e.CorrelationID = uuidOf(tenant), uuidOf(agg), uuidOf(corr)
		e.Attempts, e.LastError, e.AvailableAt, e.CreatedAt = attempts, lastError, availableAt, createdAt
		e.Status = outbox.StatusPending
		if len(deliveries) > 0 {
			var err error
			if ce.rows, err = parseDeliveries(deliveries); err != nil {
				return nil, fmt.Errorf("event %d: delivery rows: %w", e.ID, err)
			}
		}
	}
	return out, rows.Err()
}

// interner hands out one string per distinct value, up to internMax
// values (then a new string each time).
type interner map[string]string

const internMax = 256

func (in *interner) of(b []byte) string {
	if s, ok := (*in)[string(b)]; ok {
		return s
	}
	s := string(b)
	if *in == nil {
		*in = make(interner, 8)
	}
	if len(*in) < internMax {
		(*in)[s] = s
	}
	return s
}

// parseDeliveries reads the claim's JSON array of [consumer, state,
// attempts, ms until available, held for a paused consumer].
func parseDeliveries(b []byte) (map[string]prior, error) {
	var raw [][5]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	out := make(map[string]prior, len(raw))
	for _, r := range raw {
		var name string
		var p prior
		var wait int64
		if err := errors.Join(json.Unmarshal(r[0], &name), json.Unmarshal(r[1], &p.state),
			json.Unmarshal(r[2], &p.attempts), json.Unmarshal(r[3], &wait), json.Unmarshal(r[4], &p.held)); err != nil {
			return nil, err
		}
		p.wait = time.Duration(wait) * time.Millisecond
		out[name] = p
	}
	return out, nil
}

// exclusion is what a claim leaves out: the aggregates (by id) and the
// aggregate-less events of batches not acked yet.
type exclusion struct {
	aggs [][16]byte // not uuid.UUID: pgx encodes that through its driver.Valuer, as text
	ids  []int64
	// later is the highest id of each aggregate passed (left out by id):
	// an event of it claimed now with a lower id came out of order.
	later map[[16]byte]int64
}

// add leaves out the events of a batch: its aggregate-less events by id;
// with its acks (a delivered batch), the events of an aggregate all of
// whose events in it are passable by id too, reporting whether any were;
// every other aggregate whole.
func (x *exclusion) add(evs []claimed, acks []ackRow) (passed bool) {
	ok := make(map[int64]bool, len(acks))
	for _, a := range acks {
		if passable(a) {
			ok[a.id] = true
		}
	}
	stuck := map[[16]byte]bool{} // present: left out whole; true: not added yet
	for i := range evs {
		if e := &evs[i].ev; e.AggregateID != nil && !ok[e.ID] {
			stuck[*e.AggregateID] = true
		}
	}
	for i := range evs {
		e := &evs[i].ev
		if e.AggregateID == nil {
			x.ids = append(x.ids, e.ID)
			continue
		}
		if first, whole := stuck[*e.AggregateID]; whole {
			if first {
				x.aggs = append(x.aggs, *e.AggregateID)
				stuck[*e.AggregateID] = false
			}
			continue
		}
		x.ids = append(x.ids, e.ID)
		if x.later == nil {
			x.later = map[[16]byte]int64{}
		}
		x.later[*e.AggregateID] = max(x.later[*e.AggregateID], e.ID)
		passed = true
	}
	return passed
}

// claim reads the next deliverable events of the claimable partitions, in id
// order (see claimSQL), leaving out x (nil: nothing).
//
// held is the consumers (by index) that were held back when the claim was
// made: the claim leaves out the events that only they still owe, so the
// batch must not be handed to them even if they resume before it is
// delivered (a later event of an aggregate may be in the batch without the
// earlier one a held consumer still owes).
func (r *Relay) claim(ctx context.Context, c claimable, x *exclusion, level int) (evs []claimed, held []bool, err error) {
	r.stats.claims.Add(1)
	cs := &r.q.claims[level]
	q, args := cs.all, []any{}
	if !c.all {
		q, args = cs.owned, []any{c.parts}
	}
	if x != nil {
		if c.all {
			q = cs.allBehind
		} else {
			q = cs.ownedBehind
		}
		args = append(args, x.aggs, x.ids)
	}
	held, names := r.cons.heldNow()
	args = append(args, names, r.cons.names, r.horizon(), c.probe)
	cctx, cancel := context.WithTimeout(ctx, max(r.cfg.LeaseTTL, 30*time.Second))
	defer cancel()
	br, release, err := r.sendBatch(cctx, claimBatch(q, args))
	if err != nil {
		return nil, nil, err
	}
	defer release()
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	evs, err = scanEvents(rows, r.q.claims[level].size, int(r.lastClaimed.Load()))
	r.lastClaimed.Store(int64(len(evs)))
	if err != nil {
		return nil, nil, err
	}
	return evs, held, br.Close()
}

// claimBatch runs a claim statement with sorts and JIT compilation disabled
// for its transaction (one round trip: the settings end with the batch's
// implicit transaction; set_config, since SET LOCAL would work too but log a
// warning per claim in the server's log, outside an explicit transaction
// block). The claim must walk the pending events in id order and stop at
// the batch size; with statistics that predate a burst (a new outbox, or
// autovacuum not yet round) PostgreSQL takes the pending rows for a few and
// plans to read and sort all of them instead: 280–470 ms per claim at 200,000
// pending rows, against 2 ms for the walk. JIT: see withoutJIT.
//
// Every claim runs the prepared statement's generic plan, planned once per
// connection: its arguments (owned partitions, consumer names, what is in
// flight) do not change its shape, yet PostgreSQL's cost comparison picked
// a custom plan for every call, and planning a claim cost about 1 ms of the
// server's CPU (1 µs per event of a batch of 1,000, more at the small
// batches of a moderate rate). The exclusions of claimBehindSQL are hashed
// in the generic plan too (see there).
// TestClaimWalksThePendingIndexWithoutStatistics checks the generic plans.
func claimBatch(q string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)")
	b.Queue(q, args...)
	return b
}

// sendBatch sends b on a connection of the pool, with the relay's array
// encoders installed on it (fastArrays); release hands the connection back
// once the results are closed.
func (r *Relay) sendBatch(ctx context.Context, b *pgx.Batch) (br pgx.BatchResults, release func(), err error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	useFastArrays(conn.Conn().TypeMap())
	return conn.SendBatch(ctx, b), conn.Release, nil
}

// withoutJIT runs a statement with JIT compilation disabled for its
// transaction. PostgreSQL compiles a plan to machine code first when its
// estimated cost passes jit_above_cost (100,000 by default): a claim or an
// ack of 4,000 events passes it, and the claim spent 150 of its 190 ms
// compiling (each is planned anew: its sizes are literals). The relay's
// statements are short; none gains from it.
func withoutJIT(q string, args ...any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('jit', 'off', true)")
	b.Queue(q, args...)
	return b
}
