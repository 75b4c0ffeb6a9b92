package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

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
       e.correlation_id, e.payload, e.status, e.created_at
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
	last   int64 // the cursor after this chunk
}

func (r *Reindexer) readChunk(ctx context.Context, after, until int64) (*chunk, error) {
	rows, err := r.cfg.Pool.Query(ctx, replayEventsSQL, after, until, r.cfg.ChunkSize, r.aggTypes)
	if err != nil {
		return nil, fmt.Errorf("reindex: read outbox after id %d: %w", after, err)
	}
	defer rows.Close()
	c := &chunk{last: after}
	for rows.Next() {
		e := &outbox.Event{}
		var tenant, agg, corr *uuid.UUID
		if err := rows.Scan(&e.ID, &tenant, &e.EventType, &e.SchemaVersion, &e.AggregateType, &agg, &corr, &e.Payload, &e.Status, &e.CreatedAt); err != nil {
			return nil, fmt.Errorf("reindex: read outbox after id %d: %w", after, err)
		}
		e.TenantID, e.AggregateID, e.CorrelationID = tenant, agg, corr
		c.events = append(c.events, e)
		c.last = e.ID
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reindex: read outbox after id %d: %w", after, err)
	}
	if len(c.events) < r.cfg.ChunkSize {
		c.last = until // nothing more up to the watermark
	}
	return c, nil
}

// docState is the replay's view of one document: the state the last write
// of the replay produced (or the target's document, read once).
type docState struct {
	version int64
	doc     map[string]any
	deleted bool
	known   bool // doc is the whole state (from the target, the cache or a full-state event)
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
	results := make([]*projections.Result, len(c.events))
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
				res, err := r.cfg.Projections.Project(e, []string{r.cfg.Def.Alias}, r.versionPath)
				if err != nil {
					if n := r.poison.Add(1); n <= 10 {
						r.log.Warn("reindex: event skipped, the projection rejects it", "event_id", e.ID, "reason", err.Error())
					}
					continue
				}
				if r.wants(res) {
					results[i] = res
				}
			}
		}()
	}
	wg.Wait()
	steps = map[string][]*projections.Result{}
	for _, res := range results {
		if res == nil {
			continue
		}
		if _, ok := steps[res.ID]; !ok {
			order = append(order, res.ID)
		}
		steps[res.ID] = append(steps[res.ID], res)
	}
	return order, steps
}

func (r *Reindexer) versionPath(string) string { return r.cfg.Def.VersionPath }

// apply runs the steps of one document onto st (coalescing) and returns the
// op that writes the result.
func (r *Reindexer) apply(id string, st *docState, steps []*projections.Result) (indexer.BulkOp, error) {
	def := r.cfg.Def
	for _, s := range steps {
		switch s.Op {
		case projections.OpIndex:
			if s.Partial && st.known && !st.deleted {
				st.doc = projections.DeepMerge(st.doc, s.Doc)
			} else {
				// A full state, or a partial one without a known base (every
				// earlier event compacted and no document to seed from): the
				// fields it carries are all there is.
				st.doc = projections.Clone(s.Doc)
				if st.doc == nil {
					st.doc = map[string]any{}
				}
				st.known = true
			}
			st.deleted = false
			if def.DeleteMode == mapping.DeleteSoft {
				delete(st.doc, def.TombstoneField)
			}
			if def.Tenancy.Mode == mapping.TenancyShared && s.Tenant != "" {
				st.doc[def.Tenancy.Field] = s.Tenant
			}
		case projections.OpDelete:
			st.deleted = true
			if st.doc == nil {
				st.doc = map[string]any{}
			}
			if def.Tenancy.Mode == mapping.TenancyShared && s.Tenant != "" {
				st.doc[def.Tenancy.Field] = s.Tenant
			}
		}
		st.version = s.Version
	}
	op := indexer.BulkOp{Index: r.target, ID: id, Version: st.version, Routing: st.routing}
	switch {
	case st.deleted && def.DeleteMode == mapping.DeleteHard:
		op.Type = indexer.OpDelete
	case st.deleted:
		doc := projections.Clone(st.doc)
		doc[def.TombstoneField] = true
		b, err := json.Marshal(doc)
		if err != nil {
			return op, fmt.Errorf("reindex: document %s: %w", id, err)
		}
		op.Type, op.Doc = indexer.OpIndex, b
	default:
		b, err := json.Marshal(st.doc)
		if err != nil {
			return op, fmt.Errorf("reindex: document %s: %w", id, err)
		}
		op.Type, op.Doc = indexer.OpIndex, b
	}
	return op, nil
}

// rate is a moving docs/s figure.
type rate struct {
	start time.Time
	n     int64
}

func (r *rate) perSecond(n int64) float64 {
	d := time.Since(r.start).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(n-r.n) / d
}
