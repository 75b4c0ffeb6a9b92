package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/internal/config"
)

// openPool connects to the configured database with search_path set to the
// outbox schema, and checks that the server answers.
func openPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.Database.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = cfg.Database.Schema
	pc.ConnConfig.RuntimeParams["application_name"] = "searchsync"
	pc.MaxConns = cfg.Database.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database %s:%d: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s:%d is unreachable: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	return pool, nil
}
