// Package search is the search consumer: it turns outbox events into
// versioned documents of Elasticsearch or OpenSearch indexes (upcast →
// project → merge partial state → coalesce per document → _bulk with
// version_type=external) and reports one delivery.Outcome per event.
//
// What is about the engine rather than the event — the engine unreachable
// or refusing whole requests, a cluster block, a missing index or alias, an
// _mget or index creation that fails — is delivery.Unavailable: the relay pauses
// the consumer and calls Probe (ping, the aliases resolve, no write block)
// until it can write again. A missing index names the commands that bring
// it back. docs/outages.md has the whole table.
//
// The current state a partial event merges onto comes from one _mget per
// index and batch, or from the state cache of the documents the consumer
// wrote last when the batch's events continue their version (stateCache,
// Config.StateCache).
//
// Searchable measures commit → searchable of the consumer's writes: when a
// refresh made them visible, from the indexes' refresh counts.
package search

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink"
)

// DualWrites names the extra physical indexes a live op of an alias must
// also be written to while a reindex of that alias runs (reindex.Targets).
type DualWrites interface {
	For(ctx context.Context, alias string) ([]string, error)
	// Rejected reports that target refused a write for good (poison: its
	// new mapping rejects the document): the reindex fails with reason,
	// and its target gets no more writes. The live event is not at fault;
	// its outcome is the live index's. An error (the job could not be
	// told) makes the event Unavailable, so that it is tried again.
	Rejected(ctx context.Context, alias, target, reason string) error
}

// Config configures the search consumer.
type Config struct {
	// Name of the consumer in routes, last_error and metrics. Default "search".
	Name string
	// Engine is the search engine. Required.
	Engine indexer.Engine
	// Writer sends the bulk requests. Default: indexer.NewWriter(Engine,
	// indexer.WriterConfig{Logger: Logger, RequestTimeout: RequestTimeout}).
	Writer *indexer.Writer
	// RequestTimeout bounds each request of the consumer's own (_mget,
	// per-tenant index creation, each step of Probe): an engine that does
	// not answer is Unavailable after it. Default 30s.
	RequestTimeout time.Duration
	// Projections turn events into documents. Required.
	Projections *projections.Set
	// Defs are the index definitions by alias. Required: every index a
	// projection of Indexes writes must have one.
	Defs mapping.Defs
	// Indexes are the aliases this consumer writes. Default: every index the
	// projections name.
	Indexes []string
	// DualWrites, when set, adds reindex targets to every op (see reindex.Targets).
	DualWrites DualWrites
	// Searchable, when set, is told the commit times of the events of
	// every completed write (commit → searchable, see Searchable).
	Searchable *Searchable
	// StateCache is how many documents' last written state the consumer
	// keeps, so that the next partial event of a document continuing its
	// version needs no _mget (see stateCache for why that is exact).
	// 0: the default, 10,000; negative: no cache.
	StateCache int
	// DisableCoalescing writes every event's state on its own (one bulk
	// round per event of a document) instead of one write per document and
	// batch. For measuring the effect of coalescing; default false.
	DisableCoalescing bool
	// Logger. Default: discard.
	Logger *slog.Logger
}

// ConsumerStats are counters since the consumer was made.
type ConsumerStats struct {
	Events      int64 // events handed to Deliver
	Unprojected int64 // events no projection of the consumer matched (OK, nothing written)
	Writes      int64 // document writes sent (not counting dual writes)
	Coalesced   int64 // events folded into another event's write
	MGets       int64 // _mget requests
	StateHits   int64 // documents whose current state came from the state cache, not an _mget
}

// Consumer is the search consumer: it implements sink.Consumer by upcasting
// and projecting each event, fetching the current state of documents that
// partial payloads update (the state cache, else one _mget per index per
// batch), coalescing the events of one document into one write (the final
// state, with the last event's version), and sending the writes with
// external versions through an indexer.Writer.
//
// Outcomes: the events folded into a write share its outcome (OK, or Stale
// when the engine already holds that version or a newer one). When the write
// fails, the first event of the document gets the Unavailable, Retry or
// Poison with the engine's reason and the later ones NotAttempted. A write
// to an alias and to the target of a running reindex has the worse of the
// two outcomes (Unavailable over Retry over NotAttempted), except that a
// target refusing the document for good (poison) fails the reindex through
// DualWrites.Rejected and leaves the event the live outcome. A poison event (from the
// projection) stops its aggregate: the events before it are still written
// (the state up to the last good one, with its version), the later ones are
// NotAttempted. A coalesced write that the engine rejects as poison is
// redone event by event, so that the poison lands on the event that caused
// it and the ones before it are delivered.
//
// An event that no projection of the consumer matches is OK (nothing to
// write) and counted in Unprojected.
type Consumer struct {
	cfg     Config
	writer  *indexer.Writer
	indexes []string
	logger  *slog.Logger

	mu      sync.Mutex
	ensured map[string]*mapping.Status // per-tenant aliases known to exist
	// physical is the last physical index seen behind each alias (at
	// start-up, per-tenant creation, probes), for the reason of a missing
	// index.
	physical map[string]string
	// states are the documents written last (Config.StateCache);
	// reindexing the aliases with a reindex running (see cacheable).
	states     *stateCache
	reindexing map[string]bool

	stats struct{ events, unprojected, writes, coalesced, mgets, stateHits atomic.Int64 }
}

var (
	_ sink.Consumer = (*Consumer)(nil)
	_ sink.Prober   = (*Consumer)(nil)
)

// New checks cfg and returns the consumer.
func New(cfg Config) (*Consumer, error) {
	if cfg.Engine == nil || cfg.Projections == nil {
		return nil, errors.New("search consumer: needs an engine and projections")
	}
	if err := cfg.Projections.Check(); err != nil {
		return nil, fmt.Errorf("search consumer: %w", err)
	}
	c := &Consumer{cfg: cfg, writer: cfg.Writer, logger: cfg.Logger, ensured: map[string]*mapping.Status{}, physical: map[string]string{},
		reindexing: map[string]bool{}}
	c.cfg.Name = cmp.Or(cfg.Name, "search")
	c.cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 30*time.Second)
	c.cfg.StateCache = cmp.Or(cfg.StateCache, DefaultStateCache)
	c.states = newStateCache(c.cfg.StateCache)
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.writer == nil {
		c.writer = indexer.NewWriter(cfg.Engine, indexer.WriterConfig{Logger: c.logger, RequestTimeout: c.cfg.RequestTimeout})
	}
	c.indexes = slices.Clone(cfg.Indexes)
	if len(c.indexes) == 0 {
		c.indexes = cfg.Projections.Indexes()
	}
	for _, ix := range c.indexes {
		if cfg.Defs[ix] == nil {
			return nil, fmt.Errorf("search consumer %s: index %q has no definition (known: %v)", c.cfg.Name, ix, cfg.Defs.Names())
		}
	}
	// Declared field types must fit the mappings: caught at start-up rather
	// than as poison at the first event.
	var errs []error
	for _, p := range cfg.Projections.Projections() {
		def := cfg.Defs[p.Index]
		if def == nil || !slices.Contains(c.indexes, p.Index) {
			continue
		}
		for _, f := range p.Fields {
			if err := def.CheckFieldType(f.To, string(f.Type)); err != nil {
				errs = append(errs, fmt.Errorf("projection %s: %w", p.Name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("search consumer %s: %w", c.cfg.Name, err)
	}
	return c, nil
}

// DefaultStateCache is Config.StateCache's default: documents whose last
// written state the consumer keeps.
const DefaultStateCache = 10000

// Name implements sink.Consumer.
func (c *Consumer) Name() string { return c.cfg.Name }

// Writer returns the consumer's bulk writer.
func (c *Consumer) Writer() *indexer.Writer { return c.writer }

// Stats returns a snapshot of the counters.
func (c *Consumer) Stats() ConsumerStats {
	s := &c.stats
	return ConsumerStats{Events: s.events.Load(), Unprojected: s.unprojected.Load(), Writes: s.writes.Load(),
		Coalesced: s.coalesced.Load(), MGets: s.mgets.Load(), StateHits: s.stateHits.Load()}
}

// EnsureIndexes creates the missing indexes and aliases of the consumer's
// shared-tenancy definitions and reports drift of existing ones (logged as
// "reindex required"; nothing is changed). Per-tenant aliases are ensured on
// the first event of each tenant.
func (c *Consumer) EnsureIndexes(ctx context.Context) ([]*mapping.Status, error) {
	var out []*mapping.Status
	for _, ix := range c.indexes {
		def := c.cfg.Defs[ix]
		if def.Tenancy.Mode == mapping.TenancyPerTenant {
			continue
		}
		st, err := mapping.Ensure(ctx, c.cfg.Engine, def)
		if err != nil {
			return out, err
		}
		c.logStatus(st)
		c.seen(st.Alias, st.Index)
		out = append(out, st)
	}
	return out, nil
}

func (c *Consumer) logStatus(st *mapping.Status) {
	switch {
	case st.Drift:
		c.logger.Warn(st.Message(), "alias", st.Alias, "index", st.Index, "hash", st.Hash, "live_hash", st.LiveHash)
	case st.Created:
		c.logger.Info("index created", "alias", st.Alias, "index", st.Index, "hash", st.Hash)
	}
}

// ensureTenant makes sure a per-tenant alias exists (once per process).
func (c *Consumer) ensureTenant(ctx context.Context, def *mapping.Def) error {
	c.mu.Lock()
	_, ok := c.ensured[def.Alias]
	c.mu.Unlock()
	if ok {
		return nil
	}
	st, err := mapping.Ensure(ctx, c.cfg.Engine, def)
	if err != nil {
		return err
	}
	c.logStatus(st)
	c.mu.Lock()
	c.ensured[def.Alias] = st
	c.mu.Unlock()
	c.seen(st.Alias, st.Index)
	return nil
}

// bounded runs one request of the consumer's own under RequestTimeout; an
// engine that did not answer in time is a transport error saying so.
func (c *Consumer) bounded(ctx context.Context, call func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	err := call(rctx)
	if err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return &indexer.TransportError{Op: c.cfg.Engine.Kind() + " request", Err: fmt.Errorf("no answer within %s (%w)", c.cfg.RequestTimeout, err)}
	}
	return err
}

// seen records the physical index behind alias.
func (c *Consumer) seen(alias, index string) {
	if index == "" {
		return
	}
	c.mu.Lock()
	c.physical[alias] = index
	c.mu.Unlock()
}

// missing is the outcome of a write or read through an alias that no longer
// exists (its index was deleted while searchsync ran): Unavailable, naming
// the commands that bring it back.
func (c *Consumer) missing(alias, engineSaid string) delivery.Outcome {
	c.mu.Lock()
	ix := c.physical[alias]
	c.mu.Unlock()
	what := "alias " + alias
	if ix != "" {
		what = fmt.Sprintf("index %s (alias %s)", ix, alias)
	}
	return delivery.Unavailablef("%s missing: %s; recreate it: restart `searchsync run` (it creates a missing index and alias, empty), "+
		"then `searchsync reindex %s --force` refills it from the outbox", what, engineSaid, alias)
}

// unavailable is the outcome of a request of the consumer's own (an _mget,
// creating a per-tenant index) that failed: the engine's failure, not the
// event's.
func (c *Consumer) unavailable(alias string, err error, format string, args ...any) delivery.Outcome {
	if ee, ok := indexer.AsEngineError(err); ok && ee.Type == "index_not_found_exception" {
		return c.missing(alias, ee.Error())
	}
	return delivery.Unavailablef("%s: %v", fmt.Sprintf(format, args...), err)
}

// Probe implements sink.Prober for the relay while the consumer is paused:
// the engine answers (a ping, which also checks the credentials), every
// alias the consumer writes (shared ones, and per-tenant ones it created)
// points to an index, and no write block is set on those indexes or the
// cluster (skipped when the user may not read the cluster state). It
// returns what stands in the way.
func (c *Consumer) Probe(ctx context.Context) error {
	if err := c.bounded(ctx, c.cfg.Engine.Ping); err != nil {
		return fmt.Errorf("search engine: %w", err)
	}
	var aliases []string
	for _, ix := range c.indexes {
		if c.cfg.Defs[ix].Tenancy.Mode != mapping.TenancyPerTenant {
			aliases = append(aliases, ix)
		}
	}
	c.mu.Lock()
	for a := range c.ensured {
		aliases = append(aliases, a)
	}
	c.mu.Unlock()
	slices.Sort(aliases)
	var physical []string
	for _, a := range aliases {
		var targets []string
		err := c.bounded(ctx, func(ctx context.Context) (err error) {
			targets, err = c.cfg.Engine.AliasTargets(ctx, a)
			return err
		})
		if err != nil {
			return fmt.Errorf("search engine: %w", err)
		}
		if len(targets) == 0 {
			return errors.New(c.missing(a, "the alias points to no index").Reason)
		}
		if len(targets) == 1 {
			c.seen(a, targets[0])
		}
		physical = append(physical, targets...)
	}
	var blocks []indexer.Block
	err := c.bounded(ctx, func(ctx context.Context) (err error) {
		blocks, err = c.cfg.Engine.WriteBlocks(ctx, physical...)
		return err
	})
	if ee, ok := indexer.AsEngineError(err); ok && (ee.Status == http.StatusUnauthorized || ee.Status == http.StatusForbidden) {
		// A user without the cluster state privilege: the blocks cannot
		// be checked, which must not keep the consumer paused for ever
		// (the ping above checked the credentials; a block shows in the
		// next batch).
		err = nil
	}
	if err != nil {
		return fmt.Errorf("search engine: %w", err)
	}
	if len(blocks) > 0 {
		s := make([]string, len(blocks))
		for i, b := range blocks {
			s[i] = b.String()
		}
		return fmt.Errorf("search engine refuses writes: %s", strings.Join(s, "; "))
	}
	return nil
}

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
	results := make([]*projections.Result, len(events))
	errs := make([]error, len(events))
	parallel(len(events), func(i int) {
		results[i], errs[i] = c.cfg.Projections.Project(events[i], c.indexes, c.versionPath)
		if errs[i] == nil && results[i] != nil {
			errs[i] = c.resolve(results[i])
		}
	})
	stopped := map[aggregateKey]bool{}
	targets := make(map[docKey]*target, len(events))
	// Every target of the batch in one allocation (never more than events,
	// so the slab never moves).
	slab := make([]target, 0, len(events))
	aliases := make([]string, len(events)) // the alias each event writes
	order := make([]*target, 0, len(events))
	for i, e := range events {
		key, ok := aggregateOf(e)
		if ok && stopped[key] {
			continue
		}
		res, err := results[i], errs[i]
		if err != nil {
			out[i] = delivery.Poisonf("%v", err)
			if ok {
				stopped[key] = true
			}
			continue
		}
		if res == nil {
			c.stats.unprojected.Add(1)
			out[i] = delivery.Ok()
			continue
		}
		def := c.cfg.Defs[res.Index]
		alias := res.Index
		if def.Tenancy.Mode == mapping.TenancyPerTenant {
			alias, _ = def.TenantAlias(res.Tenant) // checked by resolve
		}
		k := docKey{alias, res.ID}
		t := targets[k]
		if t == nil {
			slab = append(slab, target{def: def, alias: alias, id: res.ID})
			t = &slab[len(slab)-1]
			t.steps = t.buf[:0]
			targets[k] = t
			order = append(order, t)
		}
		t.steps = append(t.steps, step{ev: i, res: res})
		aliases[i] = alias
	}

	// 2. Per-tenant aliases, then the current state of documents that an
	// event merges onto (partial payloads, soft deletes): one _mget per alias.
	c.prepare(ctx, order, out)

	// 3. Coalesce and write.
	c.write(ctx, order, out)

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

// resolve checks a result against its index definition and fills in the
// tenant field.
func (c *Consumer) resolve(res *projections.Result) error {
	def := c.cfg.Defs[res.Index]
	if def == nil || !slices.Contains(c.indexes, res.Index) {
		return &projections.PoisonError{Projection: res.Projection, Reason: fmt.Sprintf("index %q has no definition in consumer %s", res.Index, c.cfg.Name)}
	}
	switch def.Tenancy.Mode {
	case mapping.TenancyPerTenant:
		if res.Tenant == "" {
			return &projections.PoisonError{Projection: res.Projection, Reason: fmt.Sprintf("index %s is per tenant but the event has no tenant key", def.Alias)}
		}
		if _, err := def.TenantAlias(res.Tenant); err != nil {
			return &projections.PoisonError{Projection: res.Projection, Reason: err.Error()}
		}
	case mapping.TenancyShared:
		if res.Op == projections.OpIndex && res.Tenant != "" {
			if _, ok := projections.Lookup(res.Doc, def.Tenancy.Field); !ok {
				projections.SetPath(res.Doc, def.Tenancy.Field, res.Tenant)
			}
		}
	}
	return nil
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
			r := st.res
			if (r.Op == projections.OpIndex && r.Partial) || (r.Op == projections.OpDelete && t.def.DeleteMode == mapping.DeleteSoft) {
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

// fold applies the steps of a document in order onto its current state and
// returns the op that writes the final state (nil when nothing changes),
// the steps that contributed to it and the final state (nil for a hard
// delete). It changes neither state nor the steps' documents: the final
// state is built copy-on-write (projections.Writable) and may share maps
// with both, so that it must not be changed in place either.
func fold(t *target, steps []step, state map[string]any, maxVersion int64) (*indexer.BulkOp, []int, map[string]any) {
	var contributed []int
	var last *projections.Result
	deleted := false
	w := projections.NewWritable(state)
	for i := range steps {
		s := &steps[i]
		r := s.res
		if r.Op == projections.OpIgnore {
			continue
		}
		if r.Version <= maxVersion && (maxVersion > 0 || len(contributed) > 0) {
			s.stale = true
			continue
		}
		maxVersion = r.Version
		switch r.Op {
		case projections.OpIndex:
			// The same result is folded for every target of the alias (a
			// running reindex's too, whose definition may differ): its
			// document is shared, never changed.
			if r.Partial {
				w.Merge(r.Doc)
			} else {
				w.Replace(r.Doc)
			}
			deleted = false
			if t.def.DeleteMode == mapping.DeleteSoft {
				w.SetKey(t.def.TombstoneField, false)
			}
		case projections.OpDelete:
			if t.def.DeleteMode == mapping.DeleteSoft {
				if r.Tenant != "" && t.def.Tenancy.Mode == mapping.TenancyShared {
					if _, ok := projections.Lookup(w.Doc(), t.def.Tenancy.Field); !ok {
						w.Set(t.def.Tenancy.Field, r.Tenant)
					}
				}
				w.SetKey(t.def.TombstoneField, true)
			} else {
				w.Replace(nil)
				deleted = true
			}
		}
		last = r
		contributed = append(contributed, i)
	}
	if last == nil {
		return nil, nil, nil
	}
	state = w.Doc()
	op := &indexer.BulkOp{Index: t.alias, ID: t.id, Version: last.Version, RequireAlias: true}
	if deleted {
		op.Type = indexer.OpDelete
	} else {
		op.Type = indexer.OpIndex
		doc, err := projections.Encode(state)
		if err != nil {
			// Values come from decoded JSON; this cannot happen.
			panic(fmt.Sprintf("indexer: document %s/%s does not encode: %v", t.alias, t.id, err))
		}
		op.Doc, op.Compact = doc, true
	}
	return op, contributed, state
}

// pending is one document write of a round.
type pending struct {
	t           *target
	op          *indexer.BulkOp
	contributed []int          // step indexes folded into op
	state       map[string]any // the document op writes (nil: a hard delete)
	extra       []string
}

func (c *Consumer) write(ctx context.Context, order []*target, out []delivery.Outcome) {
	ops := make([]*indexer.BulkOp, len(order))
	contrib := make([][]int, len(order))
	states := make([]map[string]any, len(order))
	parallel(len(order), func(i int) {
		if t := order[i]; !t.failed {
			ops[i], contrib[i], states[i] = fold(t, t.steps, t.current, t.curVersion)
		}
	})
	writes := make([]*pending, 0, len(order))
	pendings := make([]pending, 0, len(order)) // every write's, in one allocation
	for i, t := range order {
		if t.failed {
			continue
		}
		op, contributed := ops[i], contrib[i]
		if op == nil {
			// Only ignores or stale events: nothing to write.
			for _, s := range t.steps {
				if s.stale {
					out[s.ev] = delivery.Outcome{Kind: delivery.Stale, Reason: fmt.Sprintf("%s/%s already holds version %d or newer", t.alias, t.id, s.res.Version)}
				} else {
					out[s.ev] = delivery.Ok()
				}
			}
			continue
		}
		pendings = append(pendings, pending{t: t, op: op, contributed: contributed, state: states[i]})
		writes = append(writes, &pendings[len(pendings)-1])
	}
	if c.cfg.DisableCoalescing {
		c.redoOneByOne(ctx, writes, out)
		return
	}
	results := c.send(ctx, writes)
	var redo []*pending
	for i, p := range writes {
		o := results[i]
		if o.Kind == delivery.Poison && len(p.contributed) > 1 {
			redo = append(redo, p)
			continue
		}
		c.settle(p, o, out)
	}
	if len(redo) > 0 {
		c.redoOneByOne(ctx, redo, out)
	}
}

// send writes each pending op to its alias and to the reindex targets of
// the alias, and returns one combined outcome per pending write.
func (c *Consumer) send(ctx context.Context, writes []*pending) []delivery.Outcome {
	res := make([]delivery.Outcome, len(writes))
	ops := make([]indexer.BulkOp, 0, len(writes))
	owner := make([]int, 0, len(writes))
	dual := make([]bool, 0, len(writes)) // ops[j] is a write to a reindex target
	for i, p := range writes {
		if c.cfg.DualWrites != nil {
			extra, err := c.cfg.DualWrites.For(ctx, p.t.alias)
			if err != nil {
				// The database that holds the reindex jobs: not the event's fault.
				res[i] = delivery.Unavailablef("look up reindex targets of %s: %v", p.t.alias, err)
				continue
			}
			p.extra = extra
		}
		ops = append(ops, *p.op)
		owner = append(owner, i)
		dual = append(dual, false)
		for _, x := range p.extra {
			op := *p.op
			op.Index, op.RequireAlias = x, false // a physical reindex target
			ops = append(ops, op)
			owner = append(owner, i)
			dual = append(dual, true)
		}
	}
	if len(ops) == 0 {
		return res
	}
	c.stats.writes.Add(int64(len(writes)))
	got := c.writer.Write(ctx, ops)
	seen := make([]bool, len(writes))
	for j, o := range got {
		i := owner[j]
		oc := o.Outcome
		if oc.Kind == delivery.Unavailable && o.Result.ErrType == "index_not_found_exception" && ops[j].RequireAlias {
			oc = c.missing(ops[j].Index, fmt.Sprintf("engine answered %d %s: %s", o.Result.Status, o.Result.ErrType, o.Result.ErrReason))
		}
		if dual[j] && oc.Kind == delivery.Poison {
			// The new mapping of a running reindex refuses the document:
			// the reindex fails, not the live event.
			if err := c.cfg.DualWrites.Rejected(ctx, writes[i].t.alias, ops[j].Index, oc.Reason); err != nil {
				oc = delivery.Unavailablef("reindex target %s rejected the write (%s) and the reindex could not be failed: %v", ops[j].Index, oc.Reason, err)
			} else {
				c.logger.Warn("reindex target rejected a live write; the reindex fails", "alias", writes[i].t.alias, "target", ops[j].Index, "reason", oc.Reason)
				continue
			}
		}
		if !seen[i] {
			seen[i] = true
			res[i] = oc
			continue
		}
		res[i] = worse(res[i], oc)
	}
	return res
}

// worse combines the outcomes of one document written to several indexes:
// the document is delivered only when every index took it. Unavailable
// ranks above Retry (one index unavailable pauses the consumer rather than
// counting attempts) and below Poison (an event the live index rejects for
// good fails whatever a target says; a target's poison never gets here, see
// send).
func worse(a, b delivery.Outcome) delivery.Outcome {
	rank := func(k delivery.Kind) int {
		switch k {
		case delivery.OK:
			return 0
		case delivery.Stale:
			return 1
		case delivery.NotAttempted:
			return 2
		case delivery.Retry:
			return 3
		case delivery.Unavailable:
			return 4
		default:
			return 5
		}
	}
	if rank(b.Kind) > rank(a.Kind) {
		return b
	}
	if a.Kind == delivery.Stale && b.Kind == delivery.OK {
		return b // the live alias already had it; the reindex target took it
	}
	return a
}

// settle gives every event of a document the outcome of its write.
func (c *Consumer) settle(p *pending, o delivery.Outcome, out []delivery.Outcome) {
	t := p.t
	if o.Kind == delivery.OK && len(p.extra) == 0 {
		c.states.put(t.alias, t.id, p.op.Version, p.state)
	} else {
		// (While a reindex of the alias runs, nothing is cached: see
		// cacheable.)
		// Failed, or stale (the engine holds that version or a newer
		// one): what it holds is not known here.
		c.states.drop(t.alias, t.id)
	}
	if !o.Kind.Delivered() {
		c.failTarget(t, out, o)
		return
	}
	if n := len(p.contributed); n > 1 {
		c.stats.coalesced.Add(int64(n - 1))
	}
	for _, s := range t.steps {
		switch {
		case s.stale:
			out[s.ev] = delivery.Outcome{Kind: delivery.Stale, Reason: fmt.Sprintf("%s/%s: version %d is not newer than an event already applied", t.alias, t.id, s.res.Version)}
		default:
			out[s.ev] = o
		}
	}
}

// redoOneByOne writes the documents whose coalesced write was poison event
// by event: round r writes, for every such document, the state after its
// r-th contributing event with that event's version, until the document
// fails. The events before the poison one are delivered, the poison one
// gets the engine's reason, the later ones stay NotAttempted.
func (c *Consumer) redoOneByOne(ctx context.Context, redo []*pending, out []delivery.Outcome) {
	type round struct {
		op      *indexer.BulkOp
		step    int   // the contributing step written by op
		settled []int // every step (ignores, stale ones) whose outcome follows op
	}
	type chain struct {
		t      *target
		rounds []round
	}
	chains := make([]*chain, 0, len(redo))
	for _, p := range redo {
		t := p.t
		c.states.drop(t.alias, t.id) // written event by event below
		ch := &chain{t: t}
		state := t.current
		maxV := t.curVersion
		from := 0
		for _, ci := range p.contributed {
			// A step that contributed to the whole fold contributes
			// alone too: op is never nil.
			var op *indexer.BulkOp
			op, _, state = fold(t, t.steps[ci:ci+1], state, maxV)
			maxV = t.steps[ci].res.Version
			rd := round{op: op, step: ci}
			for k := from; k <= ci; k++ {
				rd.settled = append(rd.settled, k)
			}
			ch.rounds = append(ch.rounds, rd)
			from = ci + 1
		}
		last := &ch.rounds[len(ch.rounds)-1]
		for k := from; k < len(t.steps); k++ {
			last.settled = append(last.settled, k)
		}
		chains = append(chains, ch)
	}
	for r := 0; ; r++ {
		var writes []*pending
		var who []*chain
		for _, ch := range chains {
			if ch.t.failed || r >= len(ch.rounds) {
				continue
			}
			writes = append(writes, &pending{t: ch.t, op: ch.rounds[r].op})
			who = append(who, ch)
		}
		if len(writes) == 0 {
			return
		}
		results := c.send(ctx, writes)
		for i, ch := range who {
			o, rd, t := results[i], ch.rounds[r], ch.t
			for _, k := range rd.settled {
				s := t.steps[k]
				switch {
				case !o.Kind.Delivered() && k == rd.step:
					t.failed = true
					out[s.ev] = o
				case !o.Kind.Delivered() && k > rd.step:
					// after the failing event: NotAttempted
				case s.stale:
					out[s.ev] = delivery.Outcome{Kind: delivery.Stale, Reason: fmt.Sprintf("%s/%s: version %d is not newer than an event already applied", t.alias, t.id, s.res.Version)}
				case s.res.Op == projections.OpIgnore && !o.Kind.Delivered():
					out[s.ev] = delivery.Ok()
				default:
					out[s.ev] = o
				}
			}
		}
	}
}

// parallel runs fn(0..n-1) on up to GOMAXPROCS goroutines, in contiguous
// chunks; small n runs inline.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/64)
	if workers < 2 {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		wg.Go(func() {
			for i := start; i < end; i++ {
				fn(i)
			}
		})
	}
	wg.Wait()
}
