package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/indexer"
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

// run cleans up until ctx ends; it returns nil then.
func (j *janitor) run(ctx context.Context) error {
	t := time.NewTicker(j.interval)
	defer t.Stop()
	for {
		if gone, err := reindex.Cleanup(ctx, j.pool, j.eng, time.Now(), j.logger); err != nil && ctx.Err() == nil {
			j.logger.Warn("reindex cleanup failed; trying again next turn", "err", err)
		} else if len(gone) > 0 {
			j.logger.Info("reindex cleanup: deleted old indexes", "count", len(gone))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
