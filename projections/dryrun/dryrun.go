// Package dryrun says what the search consumers would write for one outbox
// event, without writing anything: for every search consumer the routes
// send the event to, the payload upcast to the newest schema_version, the
// projected result, the document folded onto the current one (given, read
// from the index the way the consumer reads it, or none) and every poison
// error with the path it names. It calls what the consumer calls
// (projections.Set.Upcast and Project, projections.Fold with the index
// definition's rules), so a projection file, an upcaster or a Go function
// shows up here exactly as it runs. `searchsync projections test` and the
// console's event page both print a Runner's Report.
package dryrun

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/routing"
)

// Consumer is one search consumer: its name and the indexes (aliases) it
// writes.
type Consumer struct {
	Name    string
	Indexes []string
}

// Runner holds what the search consumers of one configuration know.
type Runner struct {
	Projections *projections.Set
	Defs        mapping.Defs
	// Routing sends events to consumers; nil: every consumer takes every
	// event.
	Routing *routing.Table
	// Consumers are the search consumers, in the configuration's order.
	Consumers []Consumer
	// Current reads the current document of a result; nil: none is read
	// and the result is folded onto nothing.
	Current Current
	// Timeout bounds one read of Current (default 5s).
	Timeout time.Duration
}

// Report is what the search consumers would do with one event.
type Report struct {
	Event Event `json:"event"`
	// Routed are the consumers the routes send the event to, of any type.
	Routed []string `json:"routed"`
	// Consumers are the search consumers among them.
	Consumers []ConsumerReport `json:"consumers"`
}

// Event is the part of the event that decides its projection.
type Event struct {
	ID            int64      `json:"id,omitempty"`
	EventType     string     `json:"event_type"`
	AggregateType string     `json:"aggregate_type"`
	AggregateID   *uuid.UUID `json:"aggregate_id"`
	TenantID      *uuid.UUID `json:"tenant_id"`
	SchemaVersion int        `json:"schema_version"`
}

// ConsumerReport is one search consumer's handling of the event. Skipped is
// set when no projection of its indexes takes the event (it counts as
// delivered); Error when the event is poison; else Result and Write.
type ConsumerReport struct {
	Consumer   string      `json:"consumer"`
	Indexes    []string    `json:"indexes"`
	Projection string      `json:"projection,omitempty"`
	Skipped    string      `json:"skipped,omitempty"`
	Upcast     *Upcast     `json:"upcast,omitempty"`
	Result     *Result     `json:"result,omitempty"`
	Current    *CurrentDoc `json:"current,omitempty"`
	Write      *Write      `json:"write,omitempty"`
	Error      *Error      `json:"error,omitempty"`
	result     *projections.Result
	rules      projections.Rules
}

// Upcast is the payload brought from the event's schema_version to the
// newest one the projection reads.
type Upcast struct {
	From    int            `json:"from"`
	To      int            `json:"to"`
	Payload map[string]any `json:"payload"`
}

// Result is the projection's result (projections.Result).
type Result struct {
	Projection string         `json:"projection"`
	Index      string         `json:"index"`
	ID         string         `json:"id"`
	Version    int64          `json:"version"`
	Op         projections.Op `json:"op"`
	// Partial: Doc holds the fields the event mentions, merged onto the
	// current document; else it is the whole state.
	Partial  bool           `json:"partial"`
	Snapshot bool           `json:"snapshot,omitempty"`
	Tenant   string         `json:"tenant,omitempty"`
	Doc      map[string]any `json:"doc,omitempty"`
	// NeedsState: the consumer reads the current document to fold this
	// result (a partial payload, a soft delete).
	NeedsState bool `json:"needs_state"`
}

// CurrentDoc is the document the result was folded onto.
type CurrentDoc struct {
	// From says where it came from ("index customers", "file doc.json").
	From    string         `json:"from"`
	Found   bool           `json:"found"`
	Version int64          `json:"version,omitempty"`
	Doc     map[string]any `json:"doc,omitempty"`
	// Error says why it could not be read (the engine is away): the
	// result is then folded onto no document.
	Error string `json:"error,omitempty"`
}

// Write is what the consumer would send to the engine.
type Write struct {
	// Op is index, delete (a hard delete) or none (nothing is written:
	// the event is ignored or stale).
	Op string `json:"op"`
	// Step is what projections.Fold did with the event: applied, stale or
	// ignored.
	Step    string `json:"step"`
	Alias   string `json:"alias"`
	ID      string `json:"id"`
	Version int64  `json:"version,omitempty"`
	// SameVersion: a snapshot at the document's own version, written with
	// version_type external_gte.
	SameVersion bool           `json:"same_version,omitempty"`
	Doc         map[string]any `json:"doc,omitempty"`
	Note        string         `json:"note,omitempty"`
}

// Error is a poison event: Stage upcast, project or index (the consumer's
// check that it writes the result's index); the consumer marks the event
// failed with Message as its last error.
type Error struct {
	Stage      string `json:"stage"`
	Projection string `json:"projection,omitempty"`
	// Path is the payload path (or @column) the reason names, "" when it
	// names none.
	Path    string `json:"path,omitempty"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Run reports what every search consumer the event is routed to would do
// with it. It writes nothing; ctx bounds the reads of Current.
func (r *Runner) Run(ctx context.Context, e *outbox.Event) *Report {
	rep := &Report{Event: Event{ID: e.ID, EventType: e.EventType, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
		TenantID: e.TenantID, SchemaVersion: e.SchemaVersion}, Routed: []string{}, Consumers: []ConsumerReport{}}
	if r.Routing != nil {
		rep.Routed = append(rep.Routed, r.Routing.To(e.EventType, e.AggregateType)...)
	} else {
		for _, c := range r.Consumers {
			rep.Routed = append(rep.Routed, c.Name)
		}
	}
	for _, c := range r.Consumers {
		if !slices.Contains(rep.Routed, c.Name) {
			continue
		}
		cr := r.project(e, c)
		if cr.result != nil && cr.Error == nil {
			r.fold(ctx, &cr)
		}
		rep.Consumers = append(rep.Consumers, cr)
	}
	return rep
}

// project upcasts and projects e as consumer c does (search.Consumer's
// Deliver: Set.Project, then the result's index checked against the
// consumer's definitions).
func (r *Runner) project(e *outbox.Event, c Consumer) ConsumerReport {
	cr := ConsumerReport{Consumer: c.Name, Indexes: c.Indexes}
	p := r.Projections.Find(e.EventType, e.AggregateType, c.Indexes)
	if p == nil {
		cr.Skipped = "no projection of " + fmt.Sprint(c.Indexes) + " takes " + e.EventType + " of " + e.AggregateType + ": the event counts as delivered, nothing is written"
		return cr
	}
	cr.Projection = p.Name
	payload, err := r.Projections.Upcast(e, p.SchemaVersion)
	if err != nil {
		cr.Error = poisonError("upcast", err)
		return cr
	}
	cr.Upcast = &Upcast{From: e.SchemaVersion, To: r.Projections.NewestSchemaVersion(e.EventType, p.SchemaVersion), Payload: payload}
	res, err := r.Projections.Project(e, c.Indexes, r.versionPath)
	if err != nil {
		cr.Error = poisonError("project", err)
		return cr
	}
	def := r.Defs[res.Index]
	cr.result = res
	cr.Result = &Result{Projection: res.Projection, Index: res.Index, ID: res.ID, Version: res.Version, Op: res.Op,
		Partial: res.Partial, Snapshot: res.Snapshot, Tenant: res.Tenant, Doc: res.Doc}
	if err := mapping.Resolve(r.Defs, c.Name, c.Indexes, res); err != nil {
		cr.Error = poisonError("index", err)
		return cr
	}
	cr.rules = def.FoldRules()
	cr.Result.NeedsState = cr.rules.NeedsState(res)
	return cr
}

func (r *Runner) versionPath(index string) string {
	if d := r.Defs[index]; d != nil {
		return d.VersionPath
	}
	return ""
}

// alias is the alias the consumer writes res to: <alias>_<tenant> for a
// per-tenant index.
func (r *Runner) alias(res *projections.Result) string {
	def := r.Defs[res.Index]
	if def.Tenancy.Mode == mapping.TenancyPerTenant {
		a, _ := def.TenantAlias(res.Tenant) // checked by checkIndex
		return a
	}
	return res.Index
}

// fold reads the current document (when a Current is set) and folds the
// result onto it with projections.Fold, as the consumer does.
func (r *Runner) fold(ctx context.Context, cr *ConsumerReport) {
	res := cr.result
	alias := r.alias(res)
	var state map[string]any
	var version int64
	if r.Current != nil {
		timeout := r.Timeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		cur, err := r.Current(cctx, alias, res.ID)
		cancel()
		if err != nil {
			// Not the event's fault: the fold goes on from no document.
			cur = &CurrentDoc{Error: fmt.Sprintf("read the current document %s/%s: %v", alias, res.ID, err)}
		}
		cr.Current = cur
		if cur.Found {
			state, version = cur.Doc, cur.Version
		}
	}
	f := projections.NewFold(cr.rules, state, version)
	step := f.Apply(res)
	kind, v, doc := f.Write()
	w := &Write{Alias: alias, ID: res.ID, Step: stepName(step)}
	switch kind {
	case projections.OpIgnore:
		w.Op = "none"
		if step == projections.Stale {
			w.Note = fmt.Sprintf("stale: the event's version %d is not above the version %d of %s/%s; nothing is written and the event counts as delivered", res.Version, version, alias, res.ID)
		} else {
			w.Note = "the projection ignores this event type (ignore_on); the event counts as delivered"
		}
	case projections.OpDelete:
		w.Op, w.Version = "delete", v
		w.Note = "hard delete (the index's delete_mode is hard)"
	default:
		w.Op, w.Version, w.Doc, w.SameVersion = "index", v, doc, f.Snapshot()
		w.Note = foldNote(cr, res)
	}
	cr.Write = w
}

// foldNote says what the written document rests on.
func foldNote(cr *ConsumerReport, res *projections.Result) string {
	if !cr.rules.NeedsState(res) || (cr.Current != nil && cr.Current.Found) {
		return ""
	}
	what := "a partial payload merges onto the current document"
	if res.Op == projections.OpDelete {
		what = "a soft delete sets the tombstone on the current document"
	}
	if cr.Current != nil && cr.Current.Error == "" {
		return what + ", and " + cr.Current.From + " has none: this is the whole document"
	}
	return what + ", which was not given: the fields the event does not mention stay as the index holds them"
}

func stepName(s projections.Step) string {
	switch s {
	case projections.Applied:
		return "applied"
	case projections.Stale:
		return "stale"
	default:
		return "ignored"
	}
}
