package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// OutboxCmd groups the operator commands on the outbox table.
type OutboxCmd struct {
	Status OutboxStatusCmd `cmd:"" help:"Counts by status and aggregate type, oldest pending age, blocked aggregates, per consumer what it owes and whether it is paused."`
	List   OutboxListCmd   `cmd:"" help:"List events by status, event type, aggregate, time or consumer (--consumer: what it still owes or parked)."`
	Retry  OutboxRetryCmd  `cmd:"" help:"Move failed events (or one consumer's failed deliveries, --consumer) back to pending (attempts 0, due now)."`
	Ack    OutboxAckCmd    `cmd:"" help:"Acknowledge failed or skipped events by hand: delete them and record who did it in aa_job (--consumer: one consumer's failed deliveries)."`
	Skip   OutboxSkipCmd   `cmd:"" help:"Set failed events skipped: they stop blocking their aggregates and stay, with their last_error, until acknowledged (no --consumer: use ack --consumer)."`
}

// OutboxStatusCmd prints the state of the outbox.
type OutboxStatusCmd struct {
	JSON     bool   `help:"Print JSON."`
	Blocked  int    `default:"50" help:"List at most this many blocked aggregates (all are counted)."`
	Consumer string `placeholder:"NAME" help:"Show this consumer only in the consumers section."`
}

// outboxStatusDoc is the JSON of `searchsync outbox status --json`: the
// outbox's census (counts by status and aggregate type, the consumers that
// are no longer configured) and, from the lag read model that `status`, the
// console and /metrics read, what is blocked and what each configured
// consumer owes.
type outboxStatusDoc struct {
	*outboxadmin.StatusReport
	Blocked      []lag.Blocked     `json:"blocked"`
	BlockedCount int64             `json:"blocked_count"`
	Consumers    []lag.ConsumerLag `json:"consumers"`
}

// Run prints the status.
func (c *OutboxStatusCmd) Run(ctx context.Context, g *Globals) error {
	e, admin, pool, err := openAdmin(ctx, g, false)
	if err != nil {
		return err
	}
	defer pool.Close()
	if c.Consumer != "" {
		if err := admin.CheckConsumer(c.Consumer); err != nil {
			return err
		}
	}
	rep, err := admin.Status(ctx, pool)
	if err != nil {
		return err
	}
	r := lag.NewReader(pool, e.cfg.Database.Schema, config.LagConsumers(e.cfg.Consumers), e.cfg.Routing())
	r.MaxListed = c.Blocked
	snap, err := r.Read(ctx)
	if err != nil {
		return err
	}
	doc := outboxStatusDoc{StatusReport: rep, Blocked: snap.Blocked, BlockedCount: snap.BlockedCount, Consumers: snap.Consumers}
	if c.Consumer != "" {
		doc.Consumers = slices.DeleteFunc(doc.Consumers, func(cs lag.ConsumerLag) bool { return cs.Name != c.Consumer })
		doc.Unconfigured = nil
	}
	if c.JSON {
		return printJSON(doc)
	}
	printOutboxStatus(os.Stdout, e.cfg.Database.Schema, doc)
	return nil
}

func printOutboxStatus(out io.Writer, schema string, doc outboxStatusDoc) {
	rep := doc.StatusReport
	fmt.Fprintf(out, "%s.aa_outbox_event at %s: %d events: %d pending, %d dispatched, %d failed, %d skipped\n",
		schema, rep.At.Format(time.RFC3339), rep.Total, rep.ByStatus[outbox.StatusPending], rep.ByStatus[outbox.StatusDispatched],
		rep.ByStatus[outbox.StatusFailed], rep.ByStatus[outbox.StatusSkipped])
	if rep.OldestPending != nil {
		fmt.Fprintf(out, "oldest pending: created %s (%s ago)\n", rep.OldestPending.Format(time.RFC3339), ageText(rep.OldestPendingAge))
	} else {
		fmt.Fprintln(out, "oldest pending: none")
	}
	fmt.Fprintf(out, "blocked aggregates: %d\n\n", doc.BlockedCount)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGGREGATE TYPE\tPENDING\tDISPATCHED\tFAILED\tSKIPPED\tOLDEST PENDING")
	for _, t := range rep.AggregateTypes {
		oldest := "-"
		if t.OldestPending != nil {
			oldest = ageText(t.OldestPendingAge) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", t.AggregateType, t.ByStatus[outbox.StatusPending], t.ByStatus[outbox.StatusDispatched],
			t.ByStatus[outbox.StatusFailed], t.ByStatus[outbox.StatusSkipped], oldest)
	}
	tw.Flush()
	if len(doc.Blocked) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "BLOCKED AGGREGATE\tHEAD ID\tHEAD EVENT TYPE\tSTATUS\tATTEMPTS\tWAITING\tHOLDS BACK\tLAST ERROR")
		for _, b := range doc.Blocked {
			st := b.Status
			if b.Cause == lag.CauseBackingOff {
				st = "retry in " + ageText(time.Until(b.AvailableAt).Seconds())
			}
			fmt.Fprintf(tw, "%s/%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", b.AggregateType, b.AggregateID, b.HeadID, b.EventType, st,
				b.Attempts, b.Waiting, strings.Join(b.Consumers, ","), oneLine(b.LastError, 100))
		}
		tw.Flush()
		if int64(len(doc.Blocked)) < doc.BlockedCount {
			fmt.Fprintf(out, "… and %d more (--blocked N lists more)\n", doc.BlockedCount-int64(len(doc.Blocked)))
		}
	}
	if len(doc.Consumers)+len(rep.Unconfigured) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(tw, "CONSUMER\tPENDING\tFAILED\tSTATE\tPAUSED SINCE\tPROBES\tNEXT PROBE\tREASON")
		for _, c := range doc.Consumers {
			since, next, reason, probes := "-", "-", "-", 0
			if p := c.Paused; p != nil {
				since = p.Since.Format(time.RFC3339) + " (" + ageText(p.Age) + " ago)"
				if p.ProbeAt != nil {
					next = "in " + ageText(max(p.ProbeAt.Sub(rep.At).Seconds(), 0))
				}
				reason, probes = oneLine(p.Reason, 100), p.Probes
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n", c.Name, c.Pending, c.Failed, c.State, since, probes, next, reason)
		}
		for _, c := range rep.Unconfigured {
			since, next, reason := "-", "-", "-"
			if c.State == "paused" && c.PausedAt != nil {
				since = c.PausedAt.Format(time.RFC3339) + " (" + ageText(rep.At.Sub(*c.PausedAt).Seconds()) + " ago)"
			}
			if c.State == "paused" && c.ProbeAt != nil {
				next = "in " + ageText(max(c.ProbeAt.Sub(rep.At).Seconds(), 0))
			}
			if c.State == "paused" {
				reason = oneLine(deref(c.Reason), 100)
			}
			fmt.Fprintf(tw, "%s (not configured)\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n", c.Consumer, c.Pending, c.Failed, c.State, since, c.Probes, next, reason)
		}
		tw.Flush()
	}
}

// filterFlags select events; every outbox command but status takes them.
type filterFlags struct {
	ID            []int64  `name:"id" sep:"," help:"Event ids (repeat the flag or separate by commas)."`
	Status        []string `name:"status" sep:"," enum:"pending,dispatched,failed,skipped" help:"Statuses (pending, dispatched, failed, skipped; repeat or separate by commas)."`
	EventType     string   `help:"event_type pattern: * matches any run of characters, ? one character (entity.customer.*)."`
	AggregateType string   `help:"aggregate_type pattern (* and ?), e.g. DDM_ENTITY."`
	AggregateID   string   `help:"aggregate_id (a UUID)."`
	Since         timeFlag `placeholder:"TIME" help:"created_at at or after: RFC 3339 time, date (2026-11-30) or an age (90m, 36h, 7d)."`
	Until         timeFlag `placeholder:"TIME" help:"created_at before: RFC 3339 time, date or an age."`
	Consumer      string   `placeholder:"NAME" help:"Only what this configured consumer still owes or parked; --status is then its own state (pending, failed). Not a selection by itself: retry and ack still need ids, a filter or --all."`
	Index         string   `placeholder:"ALIAS" help:"Only events whose projection writes this index of a search consumer (their event types and aggregate types); implies --consumer when one consumer alone writes it."`
	Error         string   `placeholder:"PATTERN" help:"last_error contains this, ignoring case; * and ? as in --event-type (mapper_parsing_exception, 'HTTP 4??'). With --consumer: that consumer's last_error."`
}

func (f *filterFlags) filter(ids []int64, limit int) (outboxadmin.Filter, error) {
	out := outboxadmin.Filter{IDs: append(append([]int64(nil), f.ID...), ids...), EventType: f.EventType, AggregateType: f.AggregateType,
		Since: f.Since.t, Until: f.Until.t, Limit: limit, Consumer: f.Consumer, Index: f.Index, Error: f.Error}
	for _, s := range f.Status {
		out.Statuses = append(out.Statuses, outbox.Status(s))
	}
	if f.AggregateID != "" {
		id, err := uuid.Parse(f.AggregateID)
		if err != nil {
			return out, fmt.Errorf("--aggregate-id %q: %w", f.AggregateID, err)
		}
		out.AggregateID = &id
	}
	if !out.Since.IsZero() && !out.Until.IsZero() && !out.Since.Before(out.Until) {
		return out, fmt.Errorf("--since %s is not before --until %s", out.Since.Format(time.RFC3339), out.Until.Format(time.RFC3339))
	}
	return out, nil
}

// OutboxListCmd lists events.
type OutboxListCmd struct {
	filterFlags
	Limit   int  `default:"100" help:"List at most this many events (oldest id first); 0 lists all."`
	Payload bool `help:"Include the payload (always in --json)."`
	JSON    bool `help:"Print JSON (one array of events, each with its delivery rows)."`
}

// Run lists the events.
func (c *OutboxListCmd) Run(ctx context.Context, g *Globals) error {
	f, err := c.filter(nil, c.Limit)
	if err != nil {
		return err
	}
	if c.Limit == 0 {
		f.Limit = int(^uint(0) >> 1)
	}
	_, admin, pool, err := openAdmin(ctx, g, f.Index != "")
	if err != nil {
		return err
	}
	defer pool.Close()
	evs, err := admin.List(ctx, pool, f)
	if err != nil {
		return err
	}
	if c.JSON {
		if evs == nil {
			evs = []outboxadmin.Listed{}
		}
		return printJSON(evs)
	}
	printEvents(os.Stdout, evs, f.Consumer, c.Payload, nil)
	if len(evs) == f.Limit && c.Limit > 0 {
		fmt.Fprintf(os.Stdout, "(first %d; --limit N or --limit 0 for more)\n", f.Limit)
	}
	return nil
}

// printEvents prints events as a table. Without a consumer the CONSUMERS
// column gives the delivery rows of events whose consumers diverged
// (consumer=state/attempts); with one, its state, attempts, due time and last
// error replace the outbox row's ("shared": the event has no delivery rows,
// the outbox row is every routed consumer's). outcomes, when given, are
// printed last, one per event.
func printEvents(out io.Writer, evs []outboxadmin.Listed, consumer string, payload bool, outcomes []string) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := "ID\tSTATUS\tEVENT TYPE\tAGGREGATE\tATTEMPTS\tCREATED\tAVAILABLE\tLAST ERROR\tCONSUMERS"
	if consumer != "" {
		head = "ID\tEVENT STATUS\tEVENT TYPE\tAGGREGATE\t" + strings.ToUpper(consumer) + " STATE\tATTEMPTS\tCREATED\tAVAILABLE\tLAST ERROR"
	}
	if payload {
		head += "\tPAYLOAD"
	}
	if outcomes != nil {
		head += "\tOUTCOME"
	}
	fmt.Fprintln(tw, head)
	for i, e := range evs {
		agg := e.AggregateType
		if e.AggregateID != nil {
			agg += "/" + e.AggregateID.String()
		}
		avail := func(pending bool, at time.Time) string {
			if pending {
				return at.Format(time.RFC3339)
			}
			return "-"
		}
		var line string
		if d := e.Delivery(consumer); consumer != "" && d != nil {
			state := string(d.State)
			if d.Shared {
				state += ", shared"
			}
			line = fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", e.ID, e.Status, e.EventType, agg, state, d.Attempts,
				e.CreatedAt.Format(time.RFC3339), avail(d.State == outboxadmin.DeliveryPending, d.AvailableAt), oneLine(deref(d.LastError), 80))
		} else {
			var cons []string
			for _, d := range e.Deliveries {
				if !d.Shared {
					cons = append(cons, fmt.Sprintf("%s=%s/%d", d.Consumer, d.State, d.Attempts))
				}
			}
			line = fmt.Sprintf("%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", e.ID, e.Status, e.EventType, agg, e.Attempts,
				e.CreatedAt.Format(time.RFC3339), avail(e.Status == outbox.StatusPending, e.AvailableAt), oneLine(deref(e.LastError), 80),
				cmp.Or(strings.Join(cons, " "), "-"))
		}
		if payload {
			line += "\t" + string(e.Payload)
		}
		if outcomes != nil {
			line += "\t" + outcomes[i]
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// changeFlags are the flags of retry, ack and skip.
type changeFlags struct {
	filterFlags
	IDs    []int64 `arg:"" optional:"" name:"ids" help:"Event ids."`
	Limit  int     `help:"Change at most this many events (oldest id first)."`
	All    bool    `help:"Allow a selection without ids or a narrowing filter (every failed / skipped event)."`
	DryRun bool    `help:"Show what would change; change nothing."`
	By     string  `help:"Who acts, recorded in aa_job (default: user@host)."`
	Note   string  `help:"Why, recorded in aa_job."`
	JSON   bool    `help:"Print JSON."`
}

func (c *changeFlags) options() outboxadmin.ChangeOptions {
	by := c.By
	if by == "" {
		name := os.Getenv("USER")
		if u, err := user.Current(); err == nil && u.Username != "" {
			name = u.Username
		}
		host, _ := os.Hostname()
		by = name + "@" + host
	}
	return outboxadmin.ChangeOptions{DryRun: c.DryRun, All: c.All, By: by, Note: c.Note}
}

// OutboxRetryCmd moves failed events back to pending.
type OutboxRetryCmd struct {
	changeFlags
}

// Run retries the selected failed events.
func (c *OutboxRetryCmd) Run(ctx context.Context, g *Globals) error {
	return c.run(ctx, g, "retry")
}

// OutboxAckCmd acknowledges failed and skipped events.
type OutboxAckCmd struct {
	changeFlags
}

// Run acknowledges the selected failed and skipped events.
func (c *OutboxAckCmd) Run(ctx context.Context, g *Globals) error {
	return c.run(ctx, g, "ack")
}

// OutboxSkipCmd sets failed events skipped.
type OutboxSkipCmd struct {
	changeFlags
}

// Run skips the selected failed events.
func (c *OutboxSkipCmd) Run(ctx context.Context, g *Globals) error {
	return c.run(ctx, g, "skip")
}

func (c *changeFlags) run(ctx context.Context, g *Globals, action string) error {
	f, err := c.filter(c.IDs, c.Limit)
	if err != nil {
		return err
	}
	if !f.Narrows() && !c.All {
		return fmt.Errorf("outbox %s: %w", action, outboxadmin.ErrNoSelection)
	}
	_, admin, pool, err := openAdmin(ctx, g, f.Index != "")
	if err != nil {
		return err
	}
	defer pool.Close()
	ch, err := admin.Act(ctx, pool, action, f, c.options())
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(ch)
	}
	verb := map[string]string{"retry": "retried (failed → pending, attempts 0, due now)", "ack": "acknowledged (deleted, recorded in aa_job)",
		"skip": "skipped (failed → skipped: no longer blocking; kept until acknowledged)"}[action]
	if ch.Consumer != "" {
		verb = map[string]string{
			"retry": "retried for " + ch.Consumer + " (its failed deliveries → pending, attempts 0, due now)",
			"ack":   "acknowledged for " + ch.Consumer + " (its failed deliveries done, recorded in aa_job)",
		}[action]
	}
	switch {
	case ch.DryRun:
		fmt.Printf("dry run: %s would be %s; nothing changed\n", eventCount(ch.Count), verb)
	case ch.Count == 0:
		fmt.Println("no event matched; nothing changed")
	default:
		fmt.Printf("%s %s; aa_job id %d\n", eventCount(ch.Count), verb, ch.JobID)
	}
	if ch.Count > 0 {
		evs := ch.Events
		if len(evs) > 50 {
			evs = evs[:50]
		}
		listed := make([]outboxadmin.Listed, len(evs))
		outcomes := make([]string, len(evs))
		for i, e := range evs {
			listed[i], outcomes[i] = e.Listed, e.Outcome
		}
		printEvents(os.Stdout, listed, ch.Consumer, false, outcomes)
		if len(ch.Events) > len(evs) {
			fmt.Printf("… and %d more (--json lists all)\n", len(ch.Events)-len(evs))
		}
	}
	return nil
}

// openAdmin loads the configuration and connects. The admin knows the
// configured consumers and routes (for --consumer and the per-consumer
// status) and, with indexes, the projections' indexes (for --index).
func openAdmin(ctx context.Context, g *Globals, indexes bool) (*env, *outboxadmin.Admin, *pgxpool.Pool, error) {
	e, err := g.load(ctx, config.Secrets())
	if err != nil {
		return nil, nil, nil, err
	}
	admin := outboxadmin.New(e.cfg.Database.Schema).WithRouting(e.cfg.Routing())
	if indexes {
		ix, err := outboxIndexes(e.cfg)
		if err != nil {
			return nil, nil, nil, err
		}
		admin = admin.WithIndexes(ix)
	}
	pool, err := openPool(ctx, e.cfg.Database, connectTimeout, e.logger)
	if err != nil {
		return nil, nil, nil, err
	}
	return e, admin, pool, nil
}

// outboxIndexes lists the indexes of the search consumers as the outbox
// admin takes them (Filter.Index): the consumers that write each and the
// event kinds of the projections that write it. A projection pattern with
// [ ] or \ (path.Match syntax the outbox patterns lack) makes its index a
// Problem, refused when it is asked for.
func outboxIndexes(cfg *config.Config) ([]outboxadmin.Index, error) {
	var out []outboxadmin.Index
	at := map[string]int{}
	for _, cc := range cfg.Consumers {
		if cc.Search == nil {
			continue
		}
		for _, alias := range cc.Search.Indexes {
			i, ok := at[alias]
			if !ok {
				i, at[alias] = len(out), len(out)
				out = append(out, outboxadmin.Index{Name: alias})
			}
			out[i].Consumers = append(out[i].Consumers, cc.Name)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	set, err := loadProjections(cfg, builtinExamples)
	if err != nil {
		return nil, err
	}
	for _, p := range set.Projections() {
		i, ok := at[p.Index]
		if !ok {
			continue
		}
		ix := &out[i]
		for _, pat := range append(slices.Clone(p.EventTypes), p.AggregateTypes...) {
			if strings.ContainsAny(pat, `[\`) && ix.Problem == "" {
				ix.Problem = fmt.Sprintf("projection %s: pattern %q uses [ ] or \\, which the outbox filter cannot express; filter by event type instead", p.Name, pat)
			}
		}
		for _, et := range p.EventTypes {
			if len(p.AggregateTypes) == 0 {
				ix.Kinds = append(ix.Kinds, outboxadmin.Kind{EventType: et})
			}
			for _, at := range p.AggregateTypes {
				ix.Kinds = append(ix.Kinds, outboxadmin.Kind{EventType: et, AggregateType: at})
			}
		}
	}
	return out, nil
}

// timeFlag is a point in time given as RFC 3339, a date, or an age before now.
type timeFlag struct{ t time.Time }

// UnmarshalText parses the flag.
func (f *timeFlag) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			f.t = t
			return nil
		}
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseFloat(days, 64); err == nil && n >= 0 {
			f.t = time.Now().Add(-time.Duration(n * float64(24*time.Hour)))
			return nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		f.t = time.Now().Add(-d)
		return nil
	}
	return errors.New("want an RFC 3339 time (2026-11-30T10:00:00Z), a date (2026-11-30) or an age (90m, 36h, 7d)")
}

func eventCount(n int) string {
	if n == 1 {
		return "1 event"
	}
	return strconv.Itoa(n) + " events"
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func ageText(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
