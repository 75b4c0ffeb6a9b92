package search_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// bundle is one test's world: its own outbox schema, its own alias (the
// customers definition and the customer example projection renamed), a
// consumer writing to the real OpenSearch.
type bundle struct {
	t     testing.TB
	ctx   context.Context
	db    *testenv.DB
	eng   indexer.Engine
	def   *mapping.Def
	alias string
	cons  *search.Consumer
	set   *projections.Set
	w     *outbox.Writer
}

type option func(d *mapping.Def)

func hardDeletes(d *mapping.Def) { d.DeleteMode = mapping.DeleteHard }
func perTenant(d *mapping.Def)   { d.Tenancy.Mode = mapping.TenancyPerTenant }

func setup(t testing.TB, opts ...option) *bundle {
	t.Helper()
	return setupOn(t, indexer.Config{URLs: []string{testenv.EngineURL(t)}}, opts...)
}

// setupOn is setup with the engine (kind and URLs) the bundle works on.
func setupOn(t testing.TB, engCfg indexer.Config, opts ...option) *bundle {
	t.Helper()
	if tt, ok := t.(*testing.T); ok {
		tt.Parallel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	eng, err := indexer.New(engCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(eng) })
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	def := *defs["customers"]
	def.Alias = testenv.Name("cust")
	for _, o := range opts {
		o(&def)
	}
	f, err := projections.ParseFile("projections.yaml", customer.ProjectionFile())
	if err != nil {
		t.Fatal(err)
	}
	set := projections.NewSet()
	for i := range f.Projections {
		f.Projections[i].Index = def.Alias
	}
	if err := set.Add(f.Projections...); err != nil {
		t.Fatal(err)
	}
	if err := set.AddUpcasters(f.Upcasters...); err != nil {
		t.Fatal(err)
	}
	cons, err := search.New(search.Config{Engine: eng, Projections: set, Defs: mapping.Defs{def.Alias: &def}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, tenant := range []string{"", "acme", "globex", "public"} {
			alias := def.Alias
			if tenant != "" {
				alias += "_" + tenant
			}
			targets, _ := eng.AliasTargets(ctx, alias)
			for _, ix := range targets {
				_ = eng.DeleteIndex(ctx, ix)
			}
		}
	})
	if _, err := cons.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	db := testenv.NewDB(t)
	return &bundle{t: t, ctx: ctx, db: db, eng: eng, def: &def, alias: def.Alias, cons: cons, set: set,
		w: outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})}
}

// produce writes events with the producer API in one transaction and reads
// them back as the relay would see them.
func (b *bundle) produce(evs ...outbox.Event) []*outbox.Event {
	b.t.Helper()
	tx, err := b.db.Pool.Begin(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	ids, err := b.w.Write(b.ctx, tx, evs...)
	if err != nil {
		tx.Rollback(b.ctx)
		b.t.Fatal(err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
		correlation_id, payload, created_at FROM aa_outbox_event WHERE id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		b.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*outbox.Event, error) {
		var e outbox.Event
		err := r.Scan(&e.ID, &e.TenantID, &e.EventType, &e.SchemaVersion, &e.AggregateType, &e.AggregateID,
			&e.CorrelationID, &e.Payload, &e.CreatedAt)
		return &e, err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}

// deliver hands events to the consumer and checks the kinds of the outcomes.
func (b *bundle) deliver(evs []*outbox.Event, want ...delivery.Kind) []delivery.Outcome {
	b.t.Helper()
	out := b.cons.Deliver(b.ctx, evs)
	if len(out) != len(evs) {
		b.t.Fatalf("%d outcomes for %d events", len(out), len(evs))
	}
	for i := range want {
		if out[i].Kind != want[i] {
			b.t.Errorf("event %d (%s, id %d): %s %q, want %s", i, evs[i].EventType, evs[i].ID, out[i].Kind, out[i].Reason, want[i])
		}
	}
	if b.t.Failed() {
		b.t.FailNow()
	}
	return out
}

// doc reads a document by id through alias (nil when missing).
func (b *bundle) doc(alias string, id uuid.UUID) (map[string]any, int64) {
	b.t.Helper()
	docs, err := b.eng.MGet(b.ctx, alias, []string{id.String()})
	if err != nil {
		b.t.Fatal(err)
	}
	d, ok := docs[id.String()]
	if !ok {
		return nil, 0
	}
	var m map[string]any
	if err := json.Unmarshal(d.Source, &m); err != nil {
		b.t.Fatal(err)
	}
	return m, d.Version
}

// searchable counts the documents a search through alias finds with query.
func (b *bundle) searchable(alias string, query string) int64 {
	b.t.Helper()
	if err := b.eng.Refresh(b.ctx, alias); err != nil {
		b.t.Fatal(err)
	}
	var body json.RawMessage
	if query != "" {
		body = json.RawMessage(`{"query":` + query + `}`)
	}
	n, err := b.eng.Count(b.ctx, alias, body)
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

func ch(id uuid.UUID, version int64, after map[string]any) customer.Change {
	return customer.Change{ID: id, Version: version, After: after}
}

// consumer builds another consumer on the bundle's alias; mod changes its
// configuration.
func (b *bundle) consumer(mod func(c *search.Config)) *search.Consumer {
	b.t.Helper()
	cfg := search.Config{Engine: b.eng, Projections: b.set, Defs: mapping.Defs{b.alias: b.def}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := search.New(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}
