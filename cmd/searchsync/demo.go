package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/migrations"
	"github.com/searchsync/searchsync/outbox"
)

// DemoCmd migrates, generates a steady load of customer, person and
// customer-contact relation mutations through the producer API and runs the
// relay with its dashboard, until Ctrl-C.
type DemoCmd struct {
	Rate      int           `default:"200" help:"Events per second the load generator writes."`
	Batch     int           `default:"10" help:"Events per producer transaction."`
	Burst     time.Duration `default:"5s" help:"Every this often, add a burst of updates to one customer (0: none)."`
	BurstSize int           `default:"25" help:"Updates per burst."`
	Seed      uint64        `default:"1" help:"Seed of the load generator."`
	Contacts  float64       `default:"0.4" help:"Share of the events that are person and customer-contact relation events (0: customers only)."`
}

// Run runs the demo.
func (c *DemoCmd) Run(ctx context.Context, g *Globals) error {
	e, err := g.load(ctx, config.Stages(indexStage(builtinExamples)))
	if err != nil {
		return err
	}
	m, err := migrations.New(ctx, e.cfg.Database.URL, e.cfg.Database.Schema, e.logger)
	if err != nil {
		return err
	}
	_, err = m.Up(ctx)
	m.Close()
	if err != nil {
		return err
	}
	pool, err := openPool(ctx, e.cfg.Database, connectTimeout, e.logger)
	if err != nil {
		return err
	}
	defer pool.Close()

	loadDone := make(chan error, 1)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer func() {
		stopLoad()
		if err := <-loadDone; err != nil {
			e.logger.Error("demo: load generator", "err", err)
		}
	}()
	go func() {
		w := outbox.NewWriter(outbox.WriterConfig{Schema: e.cfg.Database.Schema})
		gen := loadgen.New(c.Seed)
		gen.ContactShare = c.Contacts
		n, err := loadgen.Steady(loadCtx, pool, w, gen, c.Rate, c.Batch, c.Burst, c.BurstSize)
		e.logger.Info("demo: load generator stopped", "events_written", n)
		loadDone <- err
	}()
	err = runRelay(ctx, e, connectTimeout, runHooks{onServing: func(addr string) {
		fmt.Fprint(os.Stderr, demoBanner(c.Rate, c.BurstSize, addr, e.cfg.File()))
	}})
	if ctx.Err() != nil {
		return nil // Ctrl-C is how the demo ends
	}
	return err
}

// demoBanner is what the demo prints once it serves: the addresses, and
// commands that work when pasted into a new terminal (the binary as it was
// started, with the configuration file; the services' environment first when
// the demo runs from a checkout).
func demoBanner(rate, burst int, addr, cfgFile string) string {
	self := os.Args[0]
	if !strings.ContainsRune(self, os.PathSeparator) {
		self = "searchsync" // found on the PATH
	}
	cli := self
	if cfgFile != "" {
		cli += " -c " + cfgFile
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n  searchsync demo: %d events/s of customers, persons and their contact relations (creates, partial updates, deletes, bursts of %d)\n", rate, burst)
	fmt.Fprintf(&b, "  dashboard:  http://%s/\n  metrics:    http://%s/metrics\n", addr, addr)
	if _, err := os.Stat("scripts/services.sh"); err == nil {
		wd, _ := os.Getwd()
		fmt.Fprintf(&b, "  new shell:  cd %s && eval \"$(scripts/services.sh env)\"\n", wd)
	}
	fmt.Fprintf(&b, "  status:     %s status\n  search:     %s search customers 'Lovelace'\n", cli, cli)
	fmt.Fprintf(&b, "  by contact: %s search customers 'Noether'   (customers whose contact persons are named so)\n", cli)
	fmt.Fprintf(&b, "  stop:       Ctrl-C")
	if _, err := os.Stat("scripts/demo.sh"); err == nil {
		fmt.Fprintf(&b, " (then scripts/demo.sh stop stops PostgreSQL, OpenSearch and NATS)")
	}
	b.WriteString("\n\n")
	return b.String()
}
