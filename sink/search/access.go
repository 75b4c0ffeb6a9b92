package search

import (
	"context"
	"fmt"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/mapping"
)

// CheckAccess checks at start-up that the engine credentials may write to
// and read from every shared alias the consumer writes (indexer.CheckAccess:
// a bulk update of a missing id and an _mget, which change nothing). A
// missing privilege is an *indexer.AccessError naming it, the alias and the
// user, so that start-up stops with it instead of pausing on the first
// batch. Per-tenant aliases are created on first use and checked by it. The
// index stats the searchable measurement reads are checked too; without
// them only that measurement stops (Searchable.CheckStats).
func (c *Consumer) CheckAccess(ctx context.Context) error {
	for _, ix := range c.indexes {
		def := c.cfg.Defs[ix]
		if def.Tenancy.Mode == mapping.TenancyPerTenant {
			continue
		}
		if err := c.bounded(ctx, func(ctx context.Context) error { return indexer.CheckAccess(ctx, c.cfg.Engine, def.Alias) }); err != nil {
			return fmt.Errorf("search consumer %s: %w", c.cfg.Name, err)
		}
		// The optional commit → searchable measurement needs the index
		// stats: without them it stops here, with one WARN.
		if c.cfg.Searchable != nil {
			_ = c.bounded(ctx, func(ctx context.Context) error { c.cfg.Searchable.CheckStats(ctx, def.Alias); return nil })
		}
	}
	return nil
}
