package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
)

// connectTimeout bounds how long commands try to reach PostgreSQL.
const connectTimeout = 10 * time.Second

// openPool connects to the configured database with search_path set to the
// outbox schema and fails, within timeout, with the host it tried when the
// server does not answer.
func openPool(ctx context.Context, db config.Database, timeout time.Duration) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = db.Schema
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "searchsync"
	}
	pc.MaxConns = db.MaxConns
	where := fmt.Sprintf("%s:%d (database %q, user %q)", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, pc.ConnConfig.User)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to PostgreSQL at %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s (database.url or DATABASE_URL): %w", where, err)
	}
	return pool, nil
}

// connect loads the configuration and opens the database pool: what every
// command that reads or changes the outbox starts with. The caller closes
// the pool.
func (g *Globals) connect(ctx context.Context) (*env, *pgxpool.Pool, error) {
	e, err := g.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	pool, err := openPool(ctx, e.cfg.Database, connectTimeout)
	if err != nil {
		return nil, nil, err
	}
	return e, pool, nil
}

// connectEngine is connect plus a client of the configured search engine;
// closeAll releases both.
func (g *Globals) connectEngine(ctx context.Context) (e *env, pool *pgxpool.Pool, eng indexer.Engine, closeAll func(), err error) {
	e, pool, err = g.connect(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	eng, err = indexer.New(e.cfg.Engine, nil)
	if err != nil {
		pool.Close()
		return nil, nil, nil, nil, err
	}
	return e, pool, eng, func() { indexer.Close(eng); pool.Close() }, nil
}
