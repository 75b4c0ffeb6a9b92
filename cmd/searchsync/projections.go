package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
	"github.com/searchsync/searchsync/projections/dryrun"
)

// ProjectionsCmd is `searchsync projections`.
type ProjectionsCmd struct {
	Test ProjectionsTestCmd `cmd:"" help:"Dry run: what the search consumers would write for one event (upcast payload, result, document, poison errors); writes nothing."`
}

// ProjectionsTestCmd is `searchsync projections test` (docs/search.md,
// "Testing a projection: the dry run").
type ProjectionsTestCmd struct {
	Event string `short:"e" placeholder:"FILE" xor:"source" help:"The event as JSON (- for stdin): the outbox row's shape (an object with a payload key, as outbox list --json prints) or a bare payload, whose event_type comes from --event-type."`
	ID    int64  `placeholder:"N" xor:"source" help:"Take the event with this id from the outbox."`

	EventType     string `help:"event_type (for a bare payload; overrides the file's)."`
	AggregateType string `help:"aggregate_type (for a bare payload; overrides the file's)."`
	AggregateID   string `help:"aggregate_id, a UUID (for a bare payload; overrides the file's)."`
	TenantID      string `help:"tenant_id, a UUID (overrides the file's)."`
	SchemaVersion int    `help:"schema_version (default: the file's, else 1)."`

	Current          string `placeholder:"FILE" xor:"current" help:"The current document to fold onto: the document (JSON) or the engine's GET <alias>/_doc/<id> answer (its _source and _version)."`
	CurrentVersion   int64  `placeholder:"N" help:"The version of a bare --current document (default 0: any event version applies)."`
	CurrentFromIndex bool   `xor:"current" help:"Read the current document and its version from the index, as the consumer does."`
	JSON             bool   `help:"Print the report as JSON."`
}

// Run prints the dry run of the event; it fails (exit 1) when the event is
// poison for a consumer.
func (c *ProjectionsTestCmd) Run(ctx context.Context, g *Globals) error {
	if c.Event == "" && c.ID == 0 {
		return errors.New("projections test: give the event: --event FILE (- for stdin) or --id N (from the outbox)")
	}
	opts := []config.Option{config.Secrets()}
	if c.CurrentFromIndex {
		opts = []config.Option{config.Secrets(config.SecretsEngine)}
	}
	if c.ID == 0 {
		opts = append(opts, config.NoDatabase())
	}
	e, err := g.load(ctx, opts...)
	if err != nil {
		return err
	}
	ev, err := c.event(ctx, e)
	if err != nil {
		return err
	}
	r, err := dryRunner(e.cfg)
	if err != nil {
		return err
	}
	switch {
	case c.Current != "":
		data, err := readInput(c.Current)
		if err != nil {
			return fmt.Errorf("--current %s: %w", c.Current, err)
		}
		doc, v, err := dryrun.ParseCurrent(data)
		if err != nil {
			return fmt.Errorf("--current %s: %w", c.Current, err)
		}
		if c.CurrentVersion != 0 {
			v = c.CurrentVersion
		}
		from := "file " + c.Current
		if doc == nil {
			r.Current = func(context.Context, string, string) (*dryrun.CurrentDoc, error) {
				return &dryrun.CurrentDoc{From: from}, nil
			}
		} else {
			r.Current = dryrun.Given(doc, v, from)
		}
	case c.CurrentFromIndex:
		eng, err := indexer.New(e.cfg.Engine, nil)
		if err != nil {
			return err
		}
		defer indexer.Close(eng)
		r.Current = dryrun.FromEngine(eng)
	}
	rep := r.Run(ctx, ev)
	if c.JSON {
		if err := printJSON(rep); err != nil {
			return err
		}
	} else {
		rep.WriteText(os.Stdout)
	}
	return reportError(rep)
}

// reportError fails the command for a poison event or an unreadable
// current document, after the report is printed.
func reportError(rep *dryrun.Report) error {
	var bad []string
	for _, cr := range rep.Consumers {
		if e := cr.Error; e != nil {
			what := "poison"
			if e.Path != "" {
				what += " at " + e.Path
			}
			bad = append(bad, cr.Consumer+": "+what)
		}
		if c := cr.Current; c != nil && c.Error != "" {
			bad = append(bad, cr.Consumer+": "+c.Error)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("projections test: %s", strings.Join(bad, "; "))
}

// dryRunner is the dry run of cfg's search consumers: their projections
// (loadProjections with the built-in examples), index definitions and
// routes. The CLI and the console (observer.newEvents) use it.
func dryRunner(cfg *config.Config) (*dryrun.Runner, error) {
	set, err := loadProjections(cfg, builtinExamples)
	if err != nil {
		return nil, err
	}
	defs, err := loadDefs(cfg)
	if err != nil {
		return nil, err
	}
	r := &dryrun.Runner{Projections: set, Defs: defs, Routing: cfg.Routing()}
	for _, cc := range cfg.Consumers {
		if cc.Search != nil {
			r.Consumers = append(r.Consumers, dryrun.Consumer{Name: cc.Name, Indexes: cc.Search.Indexes})
		}
	}
	return r, nil
}

// event reads the event of the command: from the outbox (--id) or the file,
// with the flags applied.
func (c *ProjectionsTestCmd) event(ctx context.Context, e *env) (*outbox.Event, error) {
	if c.ID != 0 {
		return c.outboxEvent(ctx, e)
	}
	name := c.Event
	if name == "-" {
		name = "stdin"
	}
	data, err := readInput(c.Event)
	if err != nil {
		return nil, fmt.Errorf("--event %s: %w", name, err)
	}
	ev, err := parseEvent(data)
	if err == nil {
		err = c.override(ev)
	}
	if err != nil {
		return nil, fmt.Errorf("--event %s: %w", name, err)
	}
	return ev, nil
}

func (c *ProjectionsTestCmd) outboxEvent(ctx context.Context, e *env) (*outbox.Event, error) {
	pool, err := openPool(ctx, e.cfg.Database, connectTimeout, e.logger)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	evs, err := outboxadmin.New(e.cfg.Database.Schema).List(ctx, pool, outboxadmin.Filter{IDs: []int64{c.ID}, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("--id %d: no such event in the outbox (delivered and compacted, acknowledged, or never written)", c.ID)
	}
	ev := evs[0].Event
	if err := c.override(&ev); err != nil {
		return nil, fmt.Errorf("--id %d: %w", c.ID, err)
	}
	return &ev, nil
}

func readInput(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(name)
}

// parseEvent reads an event file: an object with a "payload" key is the
// outbox row's shape (outbox.Event's JSON, as `searchsync outbox list
// --json` prints it); any other object is a bare payload. created_at
// defaults to now and schema_version to 1, as the outbox's columns do.
func parseEvent(data []byte) (*outbox.Event, error) {
	data = bytes.TrimSpace(data)
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	ev := &outbox.Event{}
	_, row := probe["payload"]
	if row {
		if err := json.Unmarshal(data, ev); err != nil {
			return nil, fmt.Errorf("not an outbox row (an object with a payload key): %w", err)
		}
		if !bytes.HasPrefix(bytes.TrimSpace(ev.Payload), []byte("{")) {
			return nil, errors.New("payload is not a JSON object")
		}
	} else {
		ev.Payload = json.RawMessage(data)
	}
	if _, given := probe["schema_version"]; !given || !row {
		// The column's default. A row that says 0 keeps it: poison, as in
		// the outbox.
		ev.SchemaVersion = 1
	}
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = time.Now().UTC()
	}
	return ev, nil
}

// override applies the flags to ev and checks what the projection needs.
func (c *ProjectionsTestCmd) override(ev *outbox.Event) error {
	if c.EventType != "" {
		ev.EventType = c.EventType
	}
	if c.AggregateType != "" {
		ev.AggregateType = c.AggregateType
	}
	if c.SchemaVersion != 0 {
		ev.SchemaVersion = c.SchemaVersion
	}
	for _, u := range []struct {
		flag, v string
		to      **uuid.UUID
	}{{"--aggregate-id", c.AggregateID, &ev.AggregateID}, {"--tenant-id", c.TenantID, &ev.TenantID}} {
		if u.v == "" {
			continue
		}
		id, err := uuid.Parse(u.v)
		if err != nil {
			return fmt.Errorf("%s %q: not a UUID", u.flag, u.v)
		}
		*u.to = &id
	}
	if ev.EventType == "" {
		return errors.New("no event_type: give it in the file (the outbox row's shape, with a payload key) or with --event-type")
	}
	return nil
}
