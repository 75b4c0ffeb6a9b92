package reindex

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

// replayEventsSQL reads the retained events after a cursor, in id order:
// dispatched ones, and pending ones that no failed event of their aggregate
// blocks (those will be delivered, to both indexes). failed and skipped
// events never reached the live index, so the new one does not get them
// either. $4 (aggregate types) is NULL when the projections of the alias use
// patterns.
const replayEventsSQL = `
SELECT e.id, e.tenant_id, e.event_type, e.schema_version, e.aggregate_type, e.aggregate_id,
       e.correlation_id, e.payload, e.status, e.created_at,
       CASE WHEN $5::text[] IS NULL THEN NULL ELSE e.payload #>> $5::text[] END` + replayWhereSQL

const replayWhereSQL = `
FROM aa_outbox_event e
WHERE e.id > $1 AND e.id <= $2
  AND ($4::text[] IS NULL OR e.aggregate_type = ANY($4))
  AND (e.status = 'dispatched'
       OR (e.status = 'pending' AND NOT EXISTS (
             SELECT 1 FROM aa_outbox_event f
             WHERE f.status = 'failed' AND f.aggregate_type = e.aggregate_type
               AND f.aggregate_id = e.aggregate_id AND f.id < e.id)))
ORDER BY e.id
LIMIT $3`

// replayHeadsSQL is replayEventsSQL without the payloads: what deciding
// whether an event is older than the seed needs ($5, the version path, is
// set).
const replayHeadsSQL = `
SELECT e.id, e.event_type, e.aggregate_type, e.aggregate_id, e.payload #>> $5::text[]` + replayWhereSQL

// eventsByIDSQL reads whole events by id.
const eventsByIDSQL = `
SELECT e.id, e.tenant_id, e.event_type, e.schema_version, e.aggregate_type, e.aggregate_id,
       e.correlation_id, e.payload, e.status, e.created_at
FROM aa_outbox_event e
WHERE e.id = ANY($1::bigint[])
ORDER BY e.id`

// maxIDSQL is the live watermark.
const maxIDSQL = `SELECT coalesce(max(id), 0) FROM aa_outbox_event`

// countEventsSQL counts the retained events per type (for --dry-run and ETA).
const countEventsSQL = `
SELECT event_type, aggregate_type, count(*), coalesce(min(id), 0), coalesce(max(id), 0)
FROM aa_outbox_event
WHERE id > $1 AND status IN ('dispatched', 'pending')
GROUP BY event_type, aggregate_type`

// chunk is one read of the outbox.
type chunk struct {
	events []*outbox.Event
	// versions are the raw payload versions at the alias's version path
	// (-1 when unknown), for skipping events the seed holds newer
	// without projecting them.
	versions []int64
	last     int64 // the cursor after this chunk
	// heads says that the events lack their payloads (and tenant,
	// correlation, status, time): readRest reads them for the events that
	// are not older than the seed.
	heads bool
	read  int // events read (before readRest drops some)
}

// readChunk reads the events of (after, until], at most ChunkSize. heads
// reads them without payloads (see readRest).
func (r *Reindexer) readChunk(ctx context.Context, after, until int64, heads bool) (*chunk, error) {
	query := replayEventsSQL
	if heads {
		query = replayHeadsSQL
	}
	rows, err := r.cfg.Pool.Query(ctx, query, after, until, r.cfg.ChunkSize, r.aggTypes, r.versionPathSQL)
	if err != nil {
		return nil, fmt.Errorf("reindex: read outbox after id %d: %w", after, err)
	}
	defer rows.Close()
	c := &chunk{last: after, heads: heads}
	for rows.Next() {
		e := &outbox.Event{}
		var tenant, agg, corr *uuid.UUID
		var rawVersion *string
		if heads {
			err = rows.Scan(&e.ID, &e.EventType, &e.AggregateType, &agg, &rawVersion)
		} else {
			err = rows.Scan(&e.ID, &tenant, &e.EventType, &e.SchemaVersion, &e.AggregateType, &agg, &corr, &e.Payload, &e.Status, &e.CreatedAt, &rawVersion)
		}
		if err != nil {
			return nil, fmt.Errorf("reindex: read outbox after id %d: %w", after, err)
		}
		e.TenantID, e.AggregateID, e.CorrelationID = tenant, agg, corr
		c.events = append(c.events, e)
		c.versions = append(c.versions, parseVersion(rawVersion))
		c.last = e.ID
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reindex: read outbox after id %d: %w", after, err)
	}
	c.read = len(c.events)
	if len(c.events) < r.cfg.ChunkSize {
		c.last = until // nothing more up to the watermark
	}
	return c, nil
}

func parseVersion(raw *string) int64 {
	if raw != nil {
		if n, err := strconv.ParseInt(*raw, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// readRest completes a chunk read without payloads: the events the search
// consumer wants and the seed does not hold at a newer or equal version
// are read whole; the others are dropped (counted as older than the seed).
// An event gone in between (compacted: delivered long ago, so the seed
// holds it) is dropped too.
func (r *Reindexer) readRest(ctx context.Context, c *chunk) error {
	var ids []int64
	versions := map[int64]int64{}
	for i, e := range c.events {
		if r.cfg.Wants != nil && !r.cfg.Wants(e.EventType, e.AggregateType) {
			continue
		}
		if r.seededNewer(e, c.versions[i]) {
			continue
		}
		ids = append(ids, e.ID)
		versions[e.ID] = c.versions[i]
	}
	c.events, c.versions, c.heads = c.events[:0], c.versions[:0], false
	if len(ids) == 0 {
		return nil
	}
	rows, err := r.cfg.Pool.Query(ctx, eventsByIDSQL, ids)
	if err != nil {
		return fmt.Errorf("reindex: read %d outbox events by id: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		e := &outbox.Event{}
		var tenant, agg, corr *uuid.UUID
		if err := rows.Scan(&e.ID, &tenant, &e.EventType, &e.SchemaVersion, &e.AggregateType, &agg, &corr, &e.Payload, &e.Status, &e.CreatedAt); err != nil {
			return fmt.Errorf("reindex: read outbox events by id: %w", err)
		}
		e.TenantID, e.AggregateID, e.CorrelationID = tenant, agg, corr
		c.events = append(c.events, e)
		c.versions = append(c.versions, versions[e.ID])
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reindex: read outbox events by id: %w", err)
	}
	return nil
}

// docState is the replay's view of one document: the state the last write
// of the replay produced (or the target's document, read once).
type docState struct {
	version int64
	// doc is the folded state: shared copy-on-write with the results and
	// earlier states (projections.Fold), never changed in place.
	doc     map[string]any
	copy    bool // doc came from the live index and is written even if no step is newer
	routing string
}

// wants reports whether res (a projection result) belongs to the alias being
// rebuilt: the definition's alias, and in per_tenant mode the tenant.
func (r *Reindexer) wants(res *projections.Result) bool {
	if res == nil || res.Index != r.cfg.Def.Alias || res.Op == projections.OpIgnore {
		return false
	}
	if r.cfg.Def.Tenancy.Mode == mapping.TenancyPerTenant {
		return strings.EqualFold(res.Tenant, r.cfg.Tenant)
	}
	return true
}

// project turns a chunk into per-document steps, in order; events that do
// not belong to the alias are dropped, poison is counted and logged. The
// events are projected on every core; the steps keep the id order.
func (r *Reindexer) project(c *chunk) (order []string, steps map[string][]*projections.Result) {
	results := make([][]*projections.Result, len(c.events))
	workers := max(1, min(runtime.GOMAXPROCS(0), len(c.events)/200))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(c.events); i += workers {
				e := c.events[i]
				if r.cfg.Wants != nil && !r.cfg.Wants(e.EventType, e.AggregateType) {
					continue
				}
				if r.seededNewer(e, c.versions[i]) {
					continue
				}
				rs, err := r.cfg.Projections.ProjectAll(e, []string{r.cfg.Def.Alias}, r.versionPath)
				if err != nil {
					if n := r.poison.Add(1); n <= 10 {
						r.log.Warn("reindex: event skipped, the projection rejects it", "event_id", e.ID, "reason", err.Error())
					}
					continue
				}
				for _, res := range rs {
					if r.wants(res) {
						results[i] = append(results[i], res)
					}
				}
			}
		}()
	}
	wg.Wait()
	steps = map[string][]*projections.Result{}
	for _, rs := range results {
		for _, res := range rs {
			if _, ok := steps[res.ID]; !ok {
				order = append(order, res.ID)
			}
			steps[res.ID] = append(steps[res.ID], res)
		}
	}
	return order, steps
}

func (r *Reindexer) versionPath(string) string { return r.cfg.Def.VersionPath }

// seededNewer reports whether the seed wrote e's document at a version not
// older than e's, so that projecting e is useless. It only decides where
// the projection's document id is the aggregate id and the payload version
// could be read without decoding (versionPathSQL); otherwise the event is
// projected and skipSeeded decides.
func (r *Reindexer) seededNewer(e *outbox.Event, v int64) bool {
	if v < 0 || e.AggregateID == nil || len(r.seeded) == 0 || !r.idIsAggregate {
		return false
	}
	sv, ok := r.seeded[e.AggregateID.String()]
	if !ok || v > sv {
		return false
	}
	if p := r.cfg.Projections.Find(e.EventType, e.AggregateType, []string{r.cfg.Def.Alias}); p == nil || p.Go != "" {
		return false
	}
	r.skippedEvents.Add(1)
	return true
}

// apply folds the steps of one document onto st (coalescing) with
// projections.Fold, the fold of the search consumer, so that replayed
// documents equal live ones, and returns the op that writes the result, or
// ok false when no step is newer than st (unless st is a copy of the live
// index's document, which is written as it is).
func (r *Reindexer) apply(id string, st *docState, steps []*projections.Result) (op indexer.BulkOp, ok bool, err error) {
	f := projections.NewFold(r.rules, st.doc, st.version)
	f.ApplyAll(steps)
	kind, version, doc := f.Write()
	st.doc, st.version = doc, version
	if kind == projections.OpIgnore {
		if !st.copy {
			return op, false, nil
		}
		kind = projections.OpIndex
	}
	st.copy = false
	op = indexer.BulkOp{Index: r.target, ID: id, Version: version, Routing: st.routing, SameVersion: f.Snapshot()}
	if kind == projections.OpDelete {
		op.Type = indexer.OpDelete
		return op, true, nil
	}
	b, err := projections.Encode(doc)
	if err != nil {
		return op, false, fmt.Errorf("reindex: document %s: %w", id, err)
	}
	op.Type, op.Doc = indexer.OpIndex, b
	return op, true, nil
}
