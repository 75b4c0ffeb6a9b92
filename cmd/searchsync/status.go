package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/lag"
)

// StatusCmd prints lag, backlog, failures and blocked aggregates.
type StatusCmd struct {
	JSON bool `help:"Print JSON (the same document the dashboard reads)."`
}

// Run prints the status.
func (c *StatusCmd) Run(ctx context.Context, g *Globals) error {
	e, pool, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := lag.NewReader(pool, e.cfg.Database.Schema, e.cfg.Consumers, e.cfg.Routes).Read(ctx)
	if err != nil {
		return err
	}
	doc := statusDoc{Snapshot: s, Drift: []string{}}
	drift, err := newDriftWatcher(e.cfg, e.logger)
	if err != nil {
		return err
	}
	if drift != nil {
		doc.Drift = append(doc.Drift, drift.check(ctx)...)
		indexer.Close(drift.eng)
	}
	if c.JSON {
		return printJSON(doc)
	}
	printStatus(os.Stdout, s)
	for _, d := range doc.Drift {
		fmt.Fprintln(os.Stdout, "\nDRIFT:", d)
	}
	return nil
}

// statusDoc is the JSON of `searchsync status --json`: the lag snapshot plus
// index drift warnings.
type statusDoc struct {
	*lag.Snapshot
	Drift []string `json:"drift"`
}

func printStatus(out io.Writer, s *lag.Snapshot) {
	fmt.Fprintf(out, "outbox at %s: %d pending (%d ready), %d failed, %d blocked aggregates, oldest pending %.1f s, last id %d\n\n",
		s.At.Format("15:04:05"), s.Pending, s.Ready, s.Failed, s.BlockedCount, s.OldestPendingAge, s.LastID)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tTYPE\tINDEXES\tLAG (s)\tBACKLOG\tFAILED")
	for _, c := range s.Consumers {
		idx := "-"
		if len(c.Indexes) > 0 {
			idx = fmt.Sprint(c.Indexes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%d\t%d\n", c.Name, c.Type, idx, c.OldestPendingAge, c.Pending, c.Failed)
	}
	tw.Flush()
	fmt.Fprintln(out)
	fmt.Fprintln(tw, "AGGREGATE TYPE\tPENDING\tFAILED\tOLDEST PENDING (s)")
	for _, a := range s.AggregateTypes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\n", a.AggregateType, a.Pending, a.Failed, a.OldestPendingAge)
	}
	tw.Flush()
	if len(s.Blocked) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "BLOCKED AGGREGATE\tHEAD\tSTATUS\tATTEMPTS\tWAITING\tLAST ERROR")
		for _, b := range s.Blocked {
			fmt.Fprintf(tw, "%s/%s\t%d\t%s\t%d\t%d\t%s\n", b.AggregateType, b.AggregateID, b.HeadID, b.Status, b.Attempts, b.Waiting, b.LastError)
		}
		tw.Flush()
	}
}
