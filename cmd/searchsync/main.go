// Command searchsync keeps Elasticsearch and OpenSearch indexes in step with a
// PostgreSQL transactional outbox. Run `searchsync --help` for the commands.
//
// `searchsync run` supervises its actors (supervise.go): the relay, the
// background jobs (lag sampler, compaction scheduler, drift watcher, reindex
// janitor) and the HTTP server. On SIGTERM/SIGINT it stops them in order:
// /readyz answers 503 at once; the relay stops claiming, finishes the
// batches in flight (for at most 10s, relay.Config.ShutdownGrace; then their
// events are delivered again later) and hands back its leases; then the
// background jobs stop, then the HTTP server; the consumers and the pool are
// closed last, when every actor has returned.
//
// Every actor is fatal: one that returns before it is stopped, or panics,
// stops the process the same way and `run` exits 1 with "<actor>: <error>".
// None of them is restarted from outside, because each already retries what
// may fail for a while: the relay waits out a lost database or LISTEN
// connection with backoff and fails only at start (unusable lease tables,
// another partition count), the background jobs log a failed turn and try
// again at the next, and the HTTP server fails only when it cannot serve.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/logging"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Globals are the flags every command takes.
type Globals struct {
	Config   string `short:"c" env:"SEARCHSYNC_CONFIG" help:"Configuration file (YAML)." type:"path"`
	LogLevel string `env:"SEARCHSYNC_LOG_LEVEL" help:"Override log.level (debug, info, warn, error)."`
	Verbose  bool   `short:"v" help:"Log at log.level in commands other than run and demo (they log warnings and errors only)."`

	// interactive: the command is one an operator types (not run or
	// demo): it logs at warn unless --verbose or --log-level.
	interactive bool
}

// CLI is the command tree.
type CLI struct {
	Globals

	Migrate     MigrateCmd       `cmd:"" help:"Create or upgrade the outbox schema."`
	Run         RunCmd           `cmd:"" help:"Deliver the outbox to the configured consumers until stopped."`
	Demo        DemoCmd          `cmd:"" help:"Migrate, generate customer mutations and run the relay with its dashboard (the README's run command)."`
	Search      SearchCmd        `cmd:"" help:"Search an index or alias (to watch documents arrive)."`
	Status      StatusCmd        `cmd:"" help:"Lag, backlog, failures and blocked aggregates per consumer and index."`
	Compact     CompactCmd       `cmd:"" help:"Delete dispatched outbox events older than the retention (the outbox_compact job), now."`
	Outbox      OutboxCmd        `cmd:"" help:"Inspect the outbox; retry or acknowledge failed events."`
	Reindex     ReindexCmd       `cmd:"" help:"Rebuild an index from the outbox with zero downtime (abort, cleanup, status)."`
	Backfill    BackfillCmd      `cmd:"" help:"Write existing data from a declared source into the outbox as snapshot events (status, abort)."`
	Projections ProjectionsCmd   `cmd:"" help:"Test projections: what the search consumers would write for an event (dry run)."`
	Version     kong.VersionFlag `help:"Print the version."`
}

// env is what every command receives: the loaded configuration and a logger.
type env struct {
	ctx    context.Context
	cfg    *config.Config
	logger *slog.Logger
}

func (g *Globals) load(ctx context.Context, opts ...config.Option) (*env, error) {
	cfg, err := config.Load(g.Config, opts...)
	if err != nil {
		return nil, err
	}
	switch {
	case g.LogLevel != "":
		cfg.Log.Level = g.LogLevel
	case g.interactive && !g.Verbose && (cfg.Log.Level == "debug" || cfg.Log.Level == "info"):
		cfg.Log.Level = "warn"
	}
	logger, err := logging.New(os.Stderr, cfg.Log.Format, cfg.Log.Level)
	if err != nil {
		return nil, err
	}
	logEngine(logger, cfg)
	return &env{ctx: ctx, cfg: cfg, logger: logger}, nil
}

func main() {
	setGCPercent()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var cli CLI
	k := kong.Parse(&cli,
		kong.Name("searchsync"),
		kong.Description("Keeps Elasticsearch and OpenSearch indexes in step with a PostgreSQL transactional outbox."),
		kong.UsageOnError(),
		kong.Vars{"version": version},
		kong.BindTo(ctx, (*context.Context)(nil)),
	)
	cmd := k.Command()
	cli.interactive = !strings.HasPrefix(cmd, "run") && !strings.HasPrefix(cmd, "demo")
	k.Bind(&cli.Globals)
	if err := k.Run(); err != nil {
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "searchsync:", err)
		os.Exit(1)
	}
}
