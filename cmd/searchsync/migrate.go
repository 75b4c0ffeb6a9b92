package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/migrations"
)

// MigrateCmd groups the schema commands.
type MigrateCmd struct {
	Up     MigrateUpCmd     `cmd:"" default:"1" help:"Apply every pending migration (idempotent)."`
	Status MigrateStatusCmd `cmd:"" help:"List migrations and whether they are applied."`
}

// MigrateUpCmd applies pending migrations.
type MigrateUpCmd struct{}

// Run applies the migrations.
func (c *MigrateUpCmd) Run(ctx context.Context, g *Globals) error {
	e, err := g.load(ctx, config.Secrets())
	if err != nil {
		return err
	}
	m, err := migrations.New(ctx, e.cfg.Database.URL, e.cfg.Database.Schema, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	applied, err := m.Up(ctx)
	if err != nil {
		return err
	}
	// The answer is the command's output, not a log line (commands log
	// warnings only, unless -v).
	if len(applied) == 0 {
		fmt.Printf("schema %s is up to date (version %d)\n", e.cfg.Database.Schema, m.Latest())
	} else {
		fmt.Printf("schema %s migrated to version %d (applied %v)\n", e.cfg.Database.Schema, m.Latest(), applied)
	}
	return nil
}

// MigrateStatusCmd lists migrations.
type MigrateStatusCmd struct {
	JSON bool `help:"Print JSON."`
}

// Run prints the status.
func (c *MigrateStatusCmd) Run(ctx context.Context, g *Globals) error {
	e, err := g.load(ctx, config.Secrets())
	if err != nil {
		return err
	}
	m, err := migrations.New(ctx, e.cfg.Database.URL, e.cfg.Database.Schema, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(st)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
	for _, s := range st {
		applied := "pending"
		if s.Applied {
			applied = s.AppliedAt
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", s.Version, s.Name, applied)
	}
	return tw.Flush()
}
