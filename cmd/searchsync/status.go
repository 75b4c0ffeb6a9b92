package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/lag"
)

// StatusCmd prints, per consumer, the deliverable lag and backlog and what
// holds the rest back (blocked by cause, failed, paused), then the backlog per
// aggregate_type and the blocked heads.
type StatusCmd struct {
	JSON bool `help:"Print JSON (the same document the dashboard reads)."`
}

// Run prints the status.
func (c *StatusCmd) Run(ctx context.Context, g *Globals) error {
	e, pool, err := g.connect(ctx, config.Secrets(config.SecretsEngine))
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := lag.NewReader(pool, e.cfg.Database.Schema, config.LagConsumers(e.cfg.Consumers), e.cfg.Routing()).Read(ctx)
	if err != nil {
		return err
	}
	doc := statusDoc{Snapshot: s, Drift: []string{}, Engine: engineInfo(e.cfg)}
	drift, driftEng, err := newDriftWatcher(e.cfg, e.logger)
	if err != nil {
		return err
	}
	if drift != nil {
		doc.Drift = append(doc.Drift, drift.Check(ctx)...)
		doc.Indexes = drift.AliasStates()
		indexer.Close(driftEng)
	}
	if doc.Backfills, err = backfillStatus(ctx, pool, e.cfg); err != nil {
		return err
	}
	if c.JSON {
		return printJSON(doc)
	}
	printEngine(os.Stdout, doc.Engine)
	printStatus(os.Stdout, s)
	printIndexes(os.Stdout, doc.Indexes)
	printBackfills(os.Stdout, doc.Backfills)
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
	// Engine is how the search engine is reached (auth method, TLS), or
	// absent without a search consumer.
	Engine *dashboard.Engine `json:"engine,omitempty"`
	// Indexes are the search consumers' aliases with their documents and
	// health (what the console's Indexes table shows).
	Indexes []dashboard.AliasDrift `json:"indexes,omitempty"`
	// Backfills is the newest job of every backfill source that has one
	// (a running or interrupted job is always its source's newest), as the
	// console's Backfills panel shows it; absent when there is none.
	Backfills []dashboard.BackfillJob `json:"backfills,omitempty"`
}

// backfillStatus reads the newest backfill job of every source.
func backfillStatus(ctx context.Context, pool dashboard.JobsDB, cfg *config.Config) ([]dashboard.BackfillJob, error) {
	names := make([]string, len(cfg.Backfill.Sources))
	for i, s := range cfg.Backfill.Sources {
		names[i] = s.Name
	}
	jobs, err := dashboard.LatestBackfills(ctx, pool, names, 15*time.Second)
	if err != nil {
		return nil, err
	}
	out := make([]dashboard.BackfillJob, len(jobs))
	for i, j := range jobs {
		out[i] = dashboard.PanelBackfillJob(j)
	}
	return out, nil
}

// printBackfills prints the Backfills section: per source its newest job,
// its progress and, when it is interrupted, what stopped it and how to
// resume it.
func printBackfills(out io.Writer, jobs []dashboard.BackfillJob) {
	if len(jobs) == 0 {
		return
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKFILL\tJOB\tSTATE\tPHASE\tROWS\tRATE (rows/s)\tETA\tSINCE\tWHY")
	for _, j := range jobs {
		rows := fmt.Sprintf("%d/%d", j.Rows, j.Total)
		if j.Percent != nil {
			rows += fmt.Sprintf(" (%.0f%%)", *j.Percent)
		}
		rate, eta := "-", "-"
		if j.State == backfill.StateRunning {
			rate, eta = fmt.Sprintf("%.0f", j.Rate), cmp.Or(j.ETA, "-")
		}
		since := j.StartedAt
		if j.FinishedAt != nil {
			since = *j.FinishedAt
		}
		why := cmp.Or(j.Waiting, j.InterruptedBy, j.Error)
		if j.Waiting != "" {
			why = "waiting: " + why
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Source, j.ID, j.State, j.Phase, rows, rate, eta,
			statusAge(time.Since(since).Seconds())+" ago", oneLineStatus(why))
	}
	tw.Flush()
	for _, j := range jobs {
		if j.State == backfill.StateInterrupted {
			fmt.Fprintf(out, "backfill %s is interrupted after %d rows: `searchsync backfill %s` (or Start in the console) resumes it\n", j.Source, j.Rows, j.Source)
		}
	}
}

// printIndexes prints the aliases of the search consumers: the live index,
// documents, the engine's health and the verdict, and a note when commit →
// searchable is not measured.
func printIndexes(out io.Writer, ix []dashboard.AliasDrift) {
	if len(ix) == 0 {
		return
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tLIVE INDEX\tDOCUMENTS\tENGINE HEALTH\tHEALTH\tWHY")
	for _, a := range ix {
		docs := "-"
		if a.Docs != nil {
			docs = fmt.Sprint(*a.Docs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Alias, cmp.Or(a.Index, "-"), docs, cmp.Or(a.EngineHealth, "-"), a.Health, oneLineStatus(a.HealthReason))
	}
	tw.Flush()
	for _, a := range ix {
		if a.SearchableOff != "" {
			fmt.Fprintf(out, "note: %s\n", a.SearchableOff)
		}
	}
}

func printStatus(out io.Writer, s *lag.Snapshot) {
	fmt.Fprintf(out, "outbox at %s: %d pending (%d ready), %d failed, %d blocked aggregates, deliverable lag %.1f s, oldest pending %.1f s, last id %d\n",
		s.At.Format("15:04:05"), s.Pending, s.Ready, s.Failed, s.BlockedCount, s.DeliverableLag, s.OldestPendingAge, s.LastID)
	switch r := s.Relays; {
	case r.Live > 0:
		fmt.Fprintf(out, "relays: %d live\n", r.Live)
	case r.LastHeartbeat != nil:
		fmt.Fprintf(out, "NO LIVE RELAY: nothing is delivered; the last heartbeat was %s ago (start `searchsync run`)\n", statusAge(time.Since(*r.LastHeartbeat).Seconds()))
	default:
		fmt.Fprintln(out, "NO LIVE RELAY: no relay has run against this schema yet (start `searchsync run`)")
	}
	fmt.Fprintf(out, "health: %s\n", s.Health.State)
	for _, r := range s.Health.Reasons {
		fmt.Fprintf(out, "  - %s\n", r)
	}
	if o := s.OutOfOrder; o.Latest != nil {
		l := o.Latest
		fmt.Fprintf(out, "out of id order: %d events delivered after a later event of their aggregate in the last 24 h; latest: event %d of %s/%s after event %d, at %s (a producer skips the aggregate lock: docs/ordering.md)\n",
			o.Last24h, l.EventID, l.AggregateType, l.AggregateID, l.AfterEventID, l.DetectedAt.Local().Format(time.DateTime))
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tTYPE\tINDEXES\tSTATE\tHEALTH\tDELIVERED/s\tDELIVERABLE LAG (s)\tDELIVERABLE\tBACKLOG\tFAILED\tBLOCKED failed/backing_off\tOLDEST PENDING (s)")
	for _, c := range s.Consumers {
		idx := "-"
		if len(c.Indexes) > 0 {
			idx = fmt.Sprint(c.Indexes)
		}
		state, lagText := c.State, fmt.Sprintf("%.1f", c.DeliverableLag)
		if c.Paused != nil {
			state, lagText = fmt.Sprintf("paused %s", statusAge(c.Paused.Age)), "- (paused)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%d\t%d\t%d\t%d/%d\t%.1f\n", c.Name, c.Type, idx, state, c.Health, c.DeliveredRate, lagText, c.Deliverable,
			c.Pending, c.Failed, c.Blocked.Failed.Aggregates, c.Blocked.BackingOff.Aggregates, c.OldestPendingAge)
	}
	tw.Flush()

	// Why the rest waits, per consumer and cause.
	var held [][]string
	for _, c := range s.Consumers {
		for _, cause := range lag.Causes {
			f := c.Blocked.Cause(cause)
			if f.Aggregates == 0 && f.Events == 0 {
				continue
			}
			head, why := "-", f.Why
			if f.HeadID != 0 {
				head = fmt.Sprint(f.HeadID)
			}
			if cause == lag.CausePaused && c.Paused != nil {
				why = fmt.Sprintf("%s (%d failed probes)", why, c.Paused.Probes)
			}
			held = append(held, []string{c.Name, cause, fmt.Sprint(f.Aggregates), fmt.Sprint(f.Events), statusAge(f.Age), head, oneLineStatus(why)})
		}
	}
	if len(held) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "HELD BACK\tCAUSE\tAGGREGATES\tEVENTS\tSINCE\tHEAD\tWHY")
		for _, h := range held {
			fmt.Fprintln(tw, strings.Join(h, "\t"))
		}
		tw.Flush()
	}

	fmt.Fprintln(out)
	fmt.Fprintln(tw, "AGGREGATE TYPE\tPENDING\tFAILED\tOLDEST PENDING (s)")
	for _, a := range s.AggregateTypes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\n", a.AggregateType, a.Pending, a.Failed, a.OldestPendingAge)
	}
	tw.Flush()
	if len(s.Blocked) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "BLOCKED AGGREGATE\tHEAD\tSTATUS\tATTEMPTS\tWAITING\tHOLDS BACK\tLAST ERROR")
		for _, b := range s.Blocked {
			holds := strings.Join(b.Consumers, ",")
			if holds == "" {
				holds = "-"
			}
			fmt.Fprintf(tw, "%s/%s\t%d\t%s\t%d\t%d\t%s\t%s\n", b.AggregateType, b.AggregateID, b.HeadID, b.Status, b.Attempts, b.Waiting, holds, oneLineStatus(b.LastError))
		}
		tw.Flush()
	}
}

// statusAge prints seconds as a rounded duration ("-" for none).
func statusAge(seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}

// oneLineStatus keeps an error message on one table line.
func oneLineStatus(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	return lag.Truncate(s, 100)
}
