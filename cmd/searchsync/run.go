package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/compaction"
	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/examples/contacts"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/background"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/migrations"
	"github.com/searchsync/searchsync/reindex"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
	natssink "github.com/searchsync/searchsync/sink/nats"
	"github.com/searchsync/searchsync/sink/search"
	"github.com/searchsync/searchsync/sink/webhook"
)

// RunCmd is the worker: it delivers the outbox until SIGTERM/SIGINT.
type RunCmd struct {
	ConnectTimeout time.Duration `default:"10s" help:"How long to try to reach PostgreSQL at start-up before giving up."`
}

// Run connects, checks the schema, builds consumers and routes, serves
// /healthz and /readyz and runs the relay until ctx is done.
func (c *RunCmd) Run(ctx context.Context, g *Globals) error {
	e, err := g.load(ctx, config.Stages(indexStage(builtinExamples)))
	if err != nil {
		return err
	}
	return runRelay(ctx, e, c.ConnectTimeout, runHooks{})
}

// runHooks lets the demo and the tests watch a run; every field may be nil.
type runHooks struct {
	// onServing is called with the HTTP address once the dashboard is served
	// (the demo prints it).
	onServing func(addr string)
	// onStopped is called after every actor returned, just before the
	// consumers and the pool are closed, with the actors still running
	// (none, unless the supervisor lost one).
	onStopped func(running []string)
}

// runRelay is `searchsync run`: it builds the actors and supervises them
// (see supervisor for the shutdown order and which failures stop it).
//
// SIGTERM/SIGINT (ctx done) during the start-up — waiting for PostgreSQL, the
// schema check, waiting for the search engine or NATS — ends it with nil, so
// the exit code is 0 as after a stop of the running relay; the error the
// cancellation caused is logged, not returned.
func runRelay(ctx context.Context, e *env, connectTimeout time.Duration, hooks runHooks) (err error) {
	cfg, logger := e.cfg, e.logger
	setMemoryLimit(logger)
	running := false
	defer func() {
		if err != nil && !running && ctx.Err() != nil {
			logger.Info("stopped during start-up (SIGTERM/SIGINT)", "interrupted", err)
			err = nil
		}
	}()

	// Health, readiness and the console's address answer from the start:
	// while run waits for PostgreSQL or an engine, /readyz says which.
	up, err := listenEarly(cfg.HTTP.Listen)
	if err != nil {
		return err
	}
	handedOver := false
	defer func() {
		if !handedOver {
			if serr := up.shutdown(context.WithoutCancel(ctx)); serr != nil {
				logger.Debug("http: stop the start-up listener", "error", serr)
			}
		}
	}()
	up.waiting("waiting for PostgreSQL")
	pool, err := openPool(ctx, cfg.Database, connectTimeout, logger)
	if err != nil {
		return err
	}
	defer pool.Close() // last: after every actor returned
	up.waiting("checking the schema")
	if err := checkSchema(ctx, cfg.Database, logger); err != nil {
		return err
	}

	obs := newObserver(cfg, pool, logger)
	if err := obs.newEvents(cfg, pool, logger); err != nil {
		return err
	}
	up.waiting("connecting the consumers")
	obs.startup = up
	consumers, err := buildConsumers(ctx, cfg, pool, obs, logger)
	defer func() {
		for _, cons := range consumers {
			if cl, ok := cons.(sink.Closer); ok {
				cl.Close()
			}
		}
	}()
	if err != nil {
		return err
	}
	obs.instrument(cfg, consumers)
	rcfg, err := relayConfig(cfg, consumers, logger)
	if err != nil {
		return err
	}
	rcfg.OnBatch = obs.observeBatch
	r, err := relay.New(pool, rcfg)
	if err != nil {
		return err
	}
	comp, err := compaction.New(pool, compactionConfig(e))
	if err != nil {
		return err
	}
	drift, driftEng, err := newDriftWatcher(cfg, logger)
	if err != nil {
		return err
	}
	obs.newHistory(cfg, pool, r.InstanceID(), logger)
	// The background services, each a background.Service, in one stage.
	services := []background.Service{obs.sampler, obs.history}
	if sched := compaction.NewScheduler(comp); cfg.Compaction.Interval >= 0 {
		services = append(services, sched)
	} else if err := sched.Run(ctx); err != nil { // logs that the schedule is disabled and returns
		return err
	}
	obs.reindex = dashboard.NewReindexPanel(pool, drift)
	// The backfills the console starts run here; stopped with the process,
	// their jobs are released and resume at the next start.
	obs.backfill = &dashboard.Backfills{Sources: cfg.Backfill.Sources, Pool: pool, Schema: cfg.Database.Schema,
		Route: cfg.Routing().To, Logger: logger}
	services = append(services, obs.backfill)
	for _, srch := range obs.searchables {
		services = append(services, srch)
	}
	if drift != nil {
		obs.drift = drift.Current
		services = append(services, drift, newJanitor(pool, driftEng, logger))
	}

	var draining atomic.Bool
	up.serve(obs.handler(healthHandler(pool, r, &draining), pool, cfg.Database.Schema, r, logger))
	handedOver = true

	// Started in the order they are stopped: the relay first (stop claiming,
	// finish or hand back the batches in flight, release the leases), then
	// the background jobs, the HTTP server last so that /readyz answers 503
	// while the relay drains. The pool is closed (deferred above) after all.
	sup := newSupervisor(logger)
	defer sup.stop() // idempotent; stops what started should a step below fail
	sup.start(ctx, "relay", actor{name: "relay", run: r.Run})
	sup.start(ctx, "background jobs", serviceActors(services)...)
	sup.start(ctx, "http server", actor{name: "http server", run: up.run})
	logger.Info("http: serving the dashboard, /metrics, /healthz and /readyz", "url", "http://"+up.addr()+"/")
	if hooks.onServing != nil {
		hooks.onServing(up.addr())
	}

	running = true
	runErr := sup.wait(ctx, func() {
		draining.Store(true)
		logger.Info("stopping: /readyz answers 503; the relay finishes its batches and hands back its leases")
	})
	if hooks.onStopped != nil {
		hooks.onStopped(sup.running())
	}
	return runErr
}

// builtinExamples are the examples indexes.examples may name.
var builtinExamples = exampleSet{"customer": customer.Register, "contacts": contacts.Register}

// checkSchema refuses a schema that is not migrated to this binary's version.
func checkSchema(ctx context.Context, db config.Database, logger *slog.Logger) error {
	m, err := migrations.New(ctx, db.URL, db.Schema, logger)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Check(ctx)
}

// healthHandler serves /healthz (the process answers) and /readyz (the
// database answers and the relay holds its leases; 503 from the moment the
// process is stopping, while the relay drains).
func healthHandler(pool *pgxpool.Pool, r *relay.Relay, draining *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		if draining.Load() {
			http.Error(w, "not ready: stopping (the relay is draining)", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			http.Error(w, "database unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		ok, msg := r.Ready()
		if !ok {
			http.Error(w, "not ready: "+msg, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready: %s\n", msg)
	})
	return mux
}

// buildConsumers builds every configured consumer by name.
func buildConsumers(ctx context.Context, cfg *config.Config, pool *pgxpool.Pool, obs *observer, logger *slog.Logger) (map[string]sink.Consumer, error) {
	out := map[string]sink.Consumer{}
	for i, cc := range cfg.Consumers {
		var (
			cons sink.Consumer
			err  error
		)
		switch cc.Type {
		case "webhook":
			cons, err = webhook.New(cc.Name, *cc.Webhook, nil, logger)
		case "nats":
			cons, err = natssink.New(ctx, cc.Name, *cc.Nats, logger)
		case "search":
			cons, err = newSearchConsumer(ctx, cfg, cc, searchOptions{DualWrites: reindex.NewTargets(pool), Logger: logger, Examples: builtinExamples,
				Writer: indexer.WriterConfig{OnBulk: obs.metrics.ObserveBulk}}, obs, logger)
		default:
			err = fmt.Errorf("consumer type %q is not built into this searchsync yet", cc.Type)
		}
		if err != nil {
			return out, fmt.Errorf("consumers[%d] (%s): %w", i, cc.Name, err)
		}
		out[cc.Name] = cons
	}
	return out, nil
}

// newSearchConsumer builds a search consumer (creating its missing indexes).
// An engine that is unreachable at start-up (or answers 429/5xx) is waited
// for with backoff, as the NATS consumer waits for its server; a bad
// definition or configuration fails at once.
func newSearchConsumer(ctx context.Context, cfg *config.Config, cc config.Consumer, o searchOptions, obs *observer, logger *slog.Logger) (*search.Consumer, error) {
	eng, err := indexer.New(cfg.Engine, nil)
	if err != nil {
		return nil, err
	}
	o.Engine = eng
	obs.readCurrentWith(eng)
	if o.Searchable, err = obs.newSearchable(eng, cc.Name, logger); err != nil {
		return nil, err
	}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(500*time.Millisecond), backoff.WithMaxInterval(15*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		c, err := searchFromConfig(ctx, cfg, cc, o)
		if err == nil {
			obs.registerLinked(cc.Name, c)
		}
		if err == nil || !indexer.IsTemporary(err) {
			return c, err
		}
		wait := bo.NextBackOff()
		logger.Warn("search engine unavailable at start-up; waiting", "consumer", cc.Name, "urls", cfg.Engine.URLs, "retry_in", wait, "err", err)
		if obs.startup != nil {
			obs.startup.waiting(fmt.Sprintf("waiting for the search engine at %s (consumer %s: %s)", strings.Join(cfg.Engine.URLs, ", "), cc.Name, err))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// relayConfig is the relay's configuration from the file: the relay section
// (config.RelayConfig) and the routes, each to its built consumer (consumers
// maps configured names to them; a route to a name that is not there is an
// error).
func relayConfig(c *config.Config, consumers map[string]sink.Consumer, logger *slog.Logger) (relay.Config, error) {
	rc := c.RelayConfig()
	rc.Logger = logger
	var errs []error
	table := c.Routing() // in the order of c.Routes
	for i, r := range c.Routes {
		cons, ok := consumers[r.Consumer]
		if !ok {
			errs = append(errs, fmt.Errorf("relay: routes[%d]: unknown consumer %q", i, r.Consumer))
			continue
		}
		rc.Routes = append(rc.Routes, relay.Route{Consumer: cons, Match: table.Routes[i].Matches})
	}
	return rc, errors.Join(errs...)
}
