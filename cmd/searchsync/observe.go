package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/metrics"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/linked"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
	"github.com/searchsync/searchsync/projections/dryrun"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
	"github.com/searchsync/searchsync/sink/search"
)

// observer is the relay process's view of itself: Prometheus metrics, the
// lag sampler and the dashboard.
type observer struct {
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	sampler *lag.Sampler
	drift   func() []string
	engine  *dashboard.Engine
	history *dashboard.History
	events  *dashboard.Events
	reindex *dashboard.Reindex
	// backfill runs the console's backfills (a background service).
	backfill *dashboard.Backfills
	// pprof serves /debug/pprof/ (http.pprof); nil when off.
	pprof http.Handler
	// startup is run's HTTP side while it starts (what it waits for).
	startup *startup
	// searchables measure commit → searchable, one per search consumer.
	searchables []*search.Searchable
	// publicURL is http.public_url (nil: none).
	publicURL *url.URL
}

// newSearchable sets up the commit → searchable measurement of the search
// consumer named consumer (run by the relay as a background actor).
func (o *observer) newSearchable(eng indexer.Engine, consumer string, logger *slog.Logger) (*search.Searchable, error) {
	s, err := search.NewSearchable(search.SearchableConfig{Engine: eng, Logger: logger,
		Observe: func(index string, seconds float64) { o.metrics.ObserveSearchable(consumer, index, seconds) }})
	if err != nil {
		return nil, err
	}
	o.searchables = append(o.searchables, s)
	return s, nil
}

// registerLinked exports the consumer's counters of the documents
// relations reach.
func (o *observer) registerLinked(consumer string, c *search.Consumer) {
	if o == nil || o.reg == nil {
		return
	}
	st := func(f func(linked.Stats) int64) func() uint64 {
		return func() uint64 { return uint64(f(c.LinkedStats())) }
	}
	metrics.RegisterLinked(o.reg, consumer, metrics.Linked{
		Conflicts:     st(func(s linked.Stats) int64 { return s.Conflicts }),
		FanOut:        st(func(s linked.Stats) int64 { return s.FanOut }),
		FanOutSkipped: st(func(s linked.Stats) int64 { return s.FanOutSkip }),
	})
}

func newObserver(cfg *config.Config, pool *pgxpool.Pool, logger *slog.Logger) *observer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reader := lag.NewReader(pool, cfg.Database.Schema, config.LagConsumers(cfg.Consumers), cfg.Routing())
	sampler := lag.NewSampler(reader, lag.SamplerConfig{Interval: cfg.HTTP.SampleInterval}, logger)
	reg.MustRegister(lag.NewCollector(sampler))
	public, _ := cfg.HTTP.ParsedPublicURL() // checked with the configuration
	return &observer{reg: reg, metrics: metrics.New(reg), sampler: sampler, engine: engineInfo(cfg), publicURL: public}
}

// newHistory sets up the console's history (aa_console_sample), written
// from the sampler's snapshots with this process's commit → delivered
// percentiles.
func (o *observer) newHistory(cfg *config.Config, pool *pgxpool.Pool, instance string, logger *slog.Logger) {
	o.history = dashboard.NewHistory(pool, o.sampler, dashboard.HistoryConfig{Schema: cfg.Database.Schema, Instance: instance,
		Interval: cfg.HTTP.HistoryInterval, Retention: cfg.HTTP.HistoryRetention, Latency: o.metrics.LatencyWindow().Since,
		Searchable: o.metrics.SearchableWindow().Since}, logger)
}

// newEvents sets up the console's event pages and actions: the CLI's
// operator code (outboxadmin.Admin with the configured routing), enabled for
// actions when http.operator_token is set, and the dry run of `searchsync
// projections test` (its current documents read by the first search
// consumer's engine: readCurrentWith).
func (o *observer) newEvents(cfg *config.Config, pool *pgxpool.Pool, logger *slog.Logger) error {
	tok, err := cfg.HTTP.OperatorToken.Resolve("http.operator_token")
	if err != nil {
		return err
	}
	ix, err := outboxIndexes(cfg)
	if err != nil {
		return err
	}
	dry, err := dryRunner(cfg)
	if err != nil {
		return err
	}
	dry.Timeout = 2 * time.Second // the page waits for it
	o.events = &dashboard.Events{Admin: outboxadmin.New(cfg.Database.Schema).WithRouting(cfg.Routing()).WithIndexes(ix), DB: pool, Token: tok, DryRun: dry}
	if cfg.HTTP.Pprof {
		o.pprof = profiling(tok, logger)
	}
	return nil
}

// readCurrentWith lets the event pages' dry run read current documents
// through eng (a search consumer's engine client), once.
func (o *observer) readCurrentWith(eng indexer.Engine) {
	if o.events != nil && o.events.DryRun != nil && o.events.DryRun.Current == nil {
		o.events.DryRun.Current = dryrun.FromEngine(eng)
	}
}

// instrument wraps every consumer with metrics.
func (o *observer) instrument(cfg *config.Config, consumers map[string]sink.Consumer) {
	for _, cc := range cfg.Consumers {
		c, ok := consumers[cc.Name]
		if !ok {
			continue
		}
		var indexes []string
		if cc.Search != nil {
			indexes = cc.Search.Indexes
		}
		consumers[cc.Name] = o.metrics.Instrument(c, indexes)
	}
}

// observeBatch feeds one relay batch to the metrics (relay.Config.OnBatch).
func (o *observer) observeBatch(b relay.BatchStats) {
	o.metrics.ObserveBatch(metrics.Batch{Claimed: b.Claimed, Dispatched: b.Dispatched, Stale: b.Stale, Retried: b.Retried,
		Failed: b.Failed, Skipped: b.Skipped, Fenced: b.Fenced, Claim: b.Claim, Deliver: b.Deliver, Ack: b.Ack})
}

// handler serves /metrics, the dashboard (/ and /api/state) and whatever
// health handler is passed in (/healthz, /readyz).
func (o *observer) handler(health http.Handler, pool *pgxpool.Pool, schema string, r *relay.Relay, logger *slog.Logger) http.Handler {
	metrics.RegisterRelay(o.reg, r.InstanceID(), metrics.Relay{
		Partitions:       func() int { return r.Stats().Partitions },
		Overtaken:        func() uint64 { return r.Stats().Overtaken },
		WatermarkWait:    func() time.Duration { return r.Stats().WatermarkWait },
		WatermarkGiveUps: func() uint64 { return r.Stats().WatermarkGiveUps },
	})
	mux := http.NewServeMux()
	mux.Handle("/healthz", health)
	mux.Handle("/readyz", health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{}))
	if o.pprof != nil {
		mux.Handle("/debug/pprof/", o.pprof)
	}
	mux.Handle("/", dashboard.Handler(dashboard.Source{
		Sampler:    o.sampler,
		Instance:   r.InstanceID(),
		Drift:      o.drift,
		Engine:     o.engine,
		History:    o.history,
		Events:     o.events,
		Partitions: func(ctx context.Context) ([]dashboard.Partition, error) { return partitionOwners(ctx, pool, schema) },
		Logger:     logger,
		Reindex:    o.reindex,
		PublicURL:  o.publicURL,
		Backfill:   o.backfill,
	}))
	return mux
}

// partitionOwners lists the live relay instances and the partitions they own.
func partitionOwners(ctx context.Context, pool *pgxpool.Pool, schema string) ([]dashboard.Partition, error) {
	s := pgx.Identifier{schema}.Sanitize()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, fmt.Sprintf(`
		SELECT i.id, coalesce(array_agg(l.partition ORDER BY l.partition) FILTER (WHERE l.partition IS NOT NULL), '{}'), i.heartbeat_at
		FROM %[1]s.aa_relay_instance i
		LEFT JOIN %[1]s.aa_relay_lease l ON l.owner = i.id AND l.expires_at > now()
		WHERE i.expires_at > now()
		GROUP BY i.id, i.heartbeat_at ORDER BY i.id`, s))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (dashboard.Partition, error) {
		var p dashboard.Partition
		var parts []int32
		err := row.Scan(&p.Owner, &parts, &p.Heartbeat)
		for _, x := range parts {
			p.Partitions = append(p.Partitions, int(x))
		}
		return p, err
	})
}
