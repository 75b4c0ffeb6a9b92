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
// The events of a document are folded onto its current state by
// projections.Fold, the fold the reindex replay uses too. The current state
// a partial event merges onto comes from one _mget per index and batch, or
// from the state cache of the documents the consumer wrote last when the
// batch's events continue their version (stateCache, Config.StateCache).
// deliver.go projects a batch and finds the current states; write.go
// folds, writes and settles the outcomes. The documents of indexes that
// relations reach carry their sources' versions inside and are written by
// the linked writer (package linked) instead, guarded by their sequence
// numbers, in rounds of whole events (linked.go).
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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/linked"
	"github.com/searchsync/searchsync/mapping"
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
	// MaxFanOut bounds the documents one write of an entity brings a new
	// copy of its fields to (relations' other_fields; linked.Config).
	// Default 1000.
	MaxFanOut int
	// LinkedRound bounds the documents of linked indexes one round of a
	// batch reads, folds and writes (whole events per round, in order): a
	// batch of thousands of events on large documents (a customer with
	// many contacts) would otherwise hold them all decoded at once.
	// Default 1000.
	LinkedRound int
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
	// linked are the indexes relations reach, written by linkedW.
	linked  map[string]bool
	linkedW *linked.Writer

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
	c.cfg.LinkedRound = cmp.Or(cfg.LinkedRound, DefaultLinkedRound)
	c.states = newStateCache(c.cfg.StateCache)
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.writer == nil {
		c.writer = indexer.NewWriter(cfg.Engine, indexer.WriterConfig{Logger: c.logger, RequestTimeout: c.cfg.RequestTimeout})
	}
	// The consumer's definitions carry the fingerprint of its projections
	// of their index: Ensure records it in a new index and reports a live
	// index built by other projections as drift.
	c.cfg.Defs = make(mapping.Defs, len(cfg.Defs))
	for name, d := range cfg.Defs {
		cp := *d
		cp.Writers = cfg.Projections.Fingerprint(name)
		c.cfg.Defs[name] = &cp
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
	if err := c.newLinked(); err != nil {
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
		if st.Unlinked {
			return out, fmt.Errorf("search consumer %s: %s", c.cfg.Name, st.Reason)
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
	switch {
	case st.Adopted:
		c.logger.Info("projections fingerprint recorded in the index: it had none (created by an earlier searchsync); "+
			"the current projections are taken as those that built it, and a later change of them is drift",
			"alias", st.Alias, "index", st.Index, "projections_hash", st.ProjectionsHash)
	case st.AdoptError != "":
		c.logger.Warn("could not record the projections fingerprint in the index; a projection change will not show as drift until a reindex",
			"alias", st.Alias, "index", st.Index, "err", st.AdoptError)
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
	if indexer.IsIndexNotFound(err) {
		ee, _ := indexer.AsEngineError(err)
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
	if indexer.IsForbidden(err) {
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
