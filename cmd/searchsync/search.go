package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
)

// SearchCmd searches an index or alias with a query string, so a person can
// watch documents arrive. It needs the engine only, not the database.
type SearchCmd struct {
	Index string `arg:"" help:"Index or alias, e.g. customers."`
	Query string `arg:"" optional:"" help:"Query string (simple_query_string syntax); empty matches everything."`
	Size  int    `default:"10" help:"Hits to show."`
	JSON  bool   `help:"Print the hits as JSON."`
}

// Run searches.
func (c *SearchCmd) Run(ctx context.Context, g *Globals) error {
	e, err := g.load(ctx, config.NoDatabase(), config.Secrets(config.SecretsEngine))
	if err != nil {
		return err
	}
	eng, err := indexer.New(e.cfg.Engine, nil)
	if err != nil {
		return err
	}
	defer indexer.Close(eng)
	query := map[string]any{"match_all": map[string]any{}}
	if c.Query != "" {
		query = map[string]any{"simple_query_string": map[string]any{"query": c.Query, "default_operator": "and"}}
	}
	body, _ := json.Marshal(map[string]any{"query": query, "size": c.Size, "version": true, "track_total_hits": true})
	res, err := eng.Search(ctx, c.Index, body)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(res)
	}
	fmt.Printf("%d documents match in %s\n", res.Total, c.Index)
	for _, h := range res.Hits {
		fmt.Printf("%s  v%d  %s\n", h.ID, h.Version, h.Source)
	}
	return nil
}
