package search

import (
	"cmp"
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

// step is one event of a document's chain.
type step struct {
	ev  int // index in the batch
	res *projections.Result
	// stale: the version is not above one already applied (in the batch or
	// held by the engine); the event changes nothing and counts as Stale.
	stale bool
}

// target is one document written by a batch.
type target struct {
	def    *mapping.Def
	rules  projections.Rules // def's
	alias  string
	id     string
	steps  []step
	buf    [2]step // steps' first room: most documents have one or two
	failed bool

	current    map[string]any
	curVersion int64
	needState  bool
}

// Deliver implements sink.Consumer.
func (c *Consumer) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
	if ctx.Err() != nil {
		return out // NotAttempted
	}
	c.stats.events.Add(int64(len(events)))

	// 1. Upcast and project, per aggregate in order; a poison event stops
	// its aggregate (later events stay NotAttempted).
	// Projection is CPU work independent per event: it runs on every core;
	// results after a poison event of the same aggregate are discarded.
	results := make([][]*projections.Result, len(events))
	errs := make([]error, len(events))
	parallel(len(events), func(i int) {
		results[i], errs[i] = c.cfg.Projections.ProjectAll(events[i], c.indexes, c.versionPath)
		for _, r := range results[i] {
			if errs[i] == nil {
				errs[i] = mapping.Resolve(c.cfg.Defs, c.cfg.Name, c.indexes, r)
			}
		}
	})
	stopped := map[aggregateKey]bool{}
	targets := make(map[docKey]*target, len(events))
	// Every target of the batch in one allocation (never more than events,
	// so the slab never moves).
	slab := make([]target, 0, len(events))
	aliases := make([]string, len(events)) // the alias each event writes
	order := make([]*target, 0, len(events))
	var links linkedBatch
	for i, e := range events {
		key, ok := aggregateOf(e)
		if ok && stopped[key] {
			continue
		}
		rs, err := results[i], errs[i]
		if err != nil {
			out[i] = delivery.Poisonf("%v", err)
			if ok {
				stopped[key] = true
			}
			continue
		}
		if len(rs) == 0 {
			c.stats.unprojected.Add(1)
			out[i] = delivery.Ok()
			continue
		}
		for _, res := range rs {
			def := c.cfg.Defs[res.Index]
			alias := res.Index
			if def.Tenancy.Mode == mapping.TenancyPerTenant {
				alias, _ = def.TenantAlias(res.Tenant) // checked by resolve
			}
			aliases[i] = cmp.Or(aliases[i], alias)
			if c.linked[res.Index] {
				links.add(i, def, alias, res)
				continue
			}
			k := docKey{alias, res.ID}
			t := targets[k]
			if t == nil {
				slab = append(slab, target{def: def, rules: def.FoldRules(), alias: alias, id: res.ID})
				t = &slab[len(slab)-1]
				t.steps = t.buf[:0]
				targets[k] = t
				order = append(order, t)
			}
			t.steps = append(t.steps, step{ev: i, res: res})
		}
	}

	// 2. Per-tenant aliases, then the current state of documents that an
	// event merges onto (partial payloads, soft deletes): one _mget per alias.
	c.prepare(ctx, order, out)

	// 3. Coalesce and write; the documents relations reach are read,
	// folded and written by the linked writer.
	c.write(ctx, order, out)
	c.writeLinked(ctx, events, &links, out)

	// 4. Order per aggregate: after the first event that was not delivered,
	// nothing of the aggregate counts.
	blocked := map[aggregateKey]bool{}
	for i, e := range events {
		key, ok := aggregateOf(e)
		if !ok {
			continue
		}
		if blocked[key] {
			out[i] = delivery.Outcome{}
			continue
		}
		if !out[i].Kind.Delivered() {
			blocked[key] = true
		}
	}
	if c.cfg.Searchable != nil {
		c.recordWritten(events, aliases, out)
	}
	return out
}

// aggregateKey is an event's aggregate (outbox.Event.AggregateKey without
// building a string per event).
type aggregateKey struct {
	typ string
	id  uuid.UUID
}

func aggregateOf(e *outbox.Event) (aggregateKey, bool) {
	if e.AggregateID == nil {
		return aggregateKey{}, false
	}
	return aggregateKey{e.AggregateType, *e.AggregateID}, true
}

// docKey is a document of a batch.
type docKey struct{ alias, id string }

// recordWritten tells Searchable the commit times of the events written
// (OK: not stale, not unprojected), per alias.
func (c *Consumer) recordWritten(events []*outbox.Event, aliases []string, out []delivery.Outcome) {
	byAlias := map[string][]time.Time{}
	for i, e := range events {
		if aliases[i] != "" && out[i].Kind == delivery.OK {
			byAlias[aliases[i]] = append(byAlias[aliases[i]], e.CreatedAt)
		}
	}
	for alias, committed := range byAlias {
		c.cfg.Searchable.Written(alias, committed)
	}
}

func (c *Consumer) versionPath(index string) string {
	if d := c.cfg.Defs[index]; d != nil {
		return d.VersionPath
	}
	return ""
}

func (c *Consumer) prepare(ctx context.Context, order []*target, out []delivery.Outcome) {
	byAlias := map[string][]*target{}
	var aliases []string
	cacheable := map[string]bool{} // by alias, asked once per batch
	for _, t := range order {
		first := t.steps[0].res
		// The current state is needed when any event merges onto it (a
		// partial one, a soft delete), not only the first: an old full-state
		// event followed by a partial one must not drop what a version in
		// between (held by the engine) wrote. fold skips events not newer
		// than the engine's version.
		for _, st := range t.steps {
			if t.rules.NeedsState(st.res) {
				t.needState = true
			}
		}
		if t.def.Tenancy.Mode == mapping.TenancyPerTenant {
			td, _ := t.def.ForTenant(first.Tenant)
			if err := c.bounded(ctx, func(ctx context.Context) error { return c.ensureTenant(ctx, td) }); err != nil {
				// Not the event's fault (the engine is away, or the
				// definition is refused, which an operator fixes).
				c.failTarget(t, out, c.unavailable(t.alias, err, "ensure index for tenant alias %s", t.alias))
				continue
			}
		}
		if t.needState {
			cached, asked := cacheable[t.alias]
			if !asked {
				cached = c.cacheable(ctx, t.alias)
				cacheable[t.alias] = cached
			}
			if cached {
				if doc, v, hit := c.states.get(t.alias, t.id, t.steps); hit {
					t.current, t.curVersion = doc, v
					c.stats.stateHits.Add(1)
					continue
				}
			}
			if byAlias[t.alias] == nil {
				aliases = append(aliases, t.alias)
			}
			byAlias[t.alias] = append(byAlias[t.alias], t)
		}
	}
	for _, alias := range aliases {
		ts := byAlias[alias]
		ids := make([]string, len(ts))
		for i, t := range ts {
			ids[i] = t.id
		}
		c.stats.mgets.Add(1)
		var docs map[string]indexer.Doc
		err := c.bounded(ctx, func(ctx context.Context) (err error) {
			docs, err = c.cfg.Engine.MGet(ctx, alias, ids)
			return err
		})
		if err != nil {
			o := c.unavailable(alias, err, "read current documents of %s", alias)
			if ctx.Err() != nil {
				o = delivery.Outcome{} // cancelled (the relay stops or lost the lease)
			}
			for _, t := range ts {
				c.failTarget(t, out, o)
			}
			continue
		}
		for _, t := range ts {
			d, ok := docs[t.id]
			if !ok {
				continue
			}
			m, err := projections.Decode(d.Source)
			if err != nil {
				c.failTarget(t, out, delivery.Retryf("current document %s/%s is not a JSON object: %v", alias, t.id, err))
				continue
			}
			t.current, t.curVersion = m, d.Version
		}
	}
}

// cacheable reports whether the state cache may serve documents of alias:
// not while a reindex of it runs. Its new index may hold documents another
// projection built (the reindex's), which the alias serves after the swap;
// so the alias's cached states are dropped when the reindex is first seen
// (before it seeds: it waits for every relay to see it), none are cached
// while it runs, and after it the documents are read from the new index
// once, as if never cached.
func (c *Consumer) cacheable(ctx context.Context, alias string) bool {
	if c.states == nil {
		return false
	}
	if c.cfg.DualWrites == nil {
		return true
	}
	targets, err := c.cfg.DualWrites.For(ctx, alias)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(targets) == 0 {
		delete(c.reindexing, alias)
		return true
	}
	if !c.reindexing[alias] {
		c.reindexing[alias] = true
		c.states.dropAlias(alias)
	}
	return false
}

// failTarget gives the first event of the document the outcome; the later
// ones stay NotAttempted.
func (c *Consumer) failTarget(t *target, out []delivery.Outcome, o delivery.Outcome) {
	t.failed = true
	out[t.steps[0].ev] = o
}
