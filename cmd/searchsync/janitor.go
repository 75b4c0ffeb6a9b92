package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/background"
	"github.com/searchsync/searchsync/reindex"
)

// janitor deletes the old indexes of finished reindexes whose keep time has
// passed (reindex.Cleanup, the same as `searchsync reindex cleanup`), at
// start and then every interval. A failed turn is logged and tried again at
// the next one.
type janitor struct {
	pool     *pgxpool.Pool
	eng      indexer.Engine
	logger   *slog.Logger
	interval time.Duration
}

func newJanitor(pool *pgxpool.Pool, eng indexer.Engine, logger *slog.Logger) *janitor {
	return &janitor{pool: pool, eng: eng, logger: logger, interval: 30 * time.Second}
}

// Name is the janitor's name among the background services.
func (j *janitor) Name() string { return "reindex janitor" }

// Run cleans up until ctx ends; it returns nil then.
func (j *janitor) Run(ctx context.Context) error {
	background.Loop{
		Interval:  j.interval,
		Immediate: true,
		Turn: func(ctx context.Context) error {
			gone, err := reindex.Cleanup(ctx, j.pool, j.eng, time.Now(), j.logger)
			if err == nil && len(gone) > 0 {
				j.logger.Info("reindex cleanup: deleted old indexes", "count", len(gone))
			}
			return err
		},
		Logger: j.logger,
		Failed: "reindex cleanup failed; trying again next turn",
	}.Run(ctx)
	return nil
}
