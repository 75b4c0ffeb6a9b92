package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// foldProjectionFile leaves the tenant field to the fold (the projection
// does not map tenant_key) and ignores *.viewed events.
const foldProjectionFile = `projections: [{name: customer, index: %s,
  event_types: ["entity.customer.*"], aggregate_types: [DDM_ENTITY], copy_all_of_after: true, ignore_on: ["*.viewed"],
  fields: [{from: code, to: code, type: keyword}, {from: entity_type, type: keyword}, {from: "@event_type", to: last_event}]}]`

// TestConsumerAndReplayFoldAlike runs the same event sequences through the
// search consumer (Deliver, batch by batch, into the live alias) and
// through the reindex replay (chunk by chunk, into an index of its own),
// both on the real engine, and requires the same documents: ids, versions
// and sources, tombstones included. The sequences: creates, partial
// updates (nested objects, explicit nulls), deletes then updates and
// re-creates, soft deletes of unknown documents, a tenant field filled in
// or set by the event, events without a tenant, ignored events, stale and
// repeated versions out of order, a hot aggregate of hundreds of events,
// and the benchmarks' realistic mix (hot keys, three tenants). Batches and
// chunks cut the aggregates at different places.
func TestConsumerAndReplayFoldAlike(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		deletes mapping.DeleteMode
		tenancy mapping.TenancyMode
	}{
		{"soft_shared", mapping.DeleteSoft, mapping.TenancyShared},
		{"hard_shared", mapping.DeleteHard, mapping.TenancyShared},
		{"soft_per_tenant", mapping.DeleteSoft, mapping.TenancyPerTenant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			live, replayed := b.foldDef(b.alias, tc.deletes, tc.tenancy), b.foldDef(b.alias+"_rp", tc.deletes, tc.tenancy)
			b.writeFoldSequences(tc.tenancy == mapping.TenancyShared)
			b.deliverAll(live)
			b.dispatchAll()
			tenants := []string{""}
			if tc.tenancy == mapping.TenancyPerTenant {
				tenants = []string{"acme", "globex", "initech"}
			}
			for _, tenant := range tenants {
				liveIx, replayIx := b.physical(live, tenant), b.replayInto(replayed, tenant)
				b.compareWith(replayIx, liveIx)
				if tenant == "" || tenant == "acme" {
					b.checkFoldRules(liveIx, tc.deletes, tc.tenancy)
				}
			}
		})
	}
}

// foldDef is the example customers definition for alias with the given
// delete and tenancy modes; its indexes go when the test ends.
func (b *bundle) foldDef(alias string, deletes mapping.DeleteMode, tenancy mapping.TenancyMode) *mapping.Def {
	b.t.Helper()
	d := b.def(nil)
	d.Alias, d.DeleteMode, d.Tenancy.Mode = alias, deletes, tenancy
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, a := range []string{alias, alias + "_acme", alias + "_globex", alias + "_initech"} {
			_ = b.eng.DeleteIndex(ctx, mapping.PhysicalName(a, 1))
		}
	})
	return d
}

// foldEvent is one crafted customer event: verb created (whole state),
// updated (partial), deleted or viewed (ignored).
func foldEvent(id uuid.UUID, verb string, version int, tenant string, after map[string]any) outbox.Event {
	p := map[string]any{"entity_type": "customer", "entity_id": id.String(), "code": "F-" + id.String()[:8],
		"version": version, "before": map[string]any{}, "after": after}
	if tenant != "" {
		p["tenant_key"] = tenant
	}
	raw, _ := json.Marshal(p)
	return outbox.Event{EventType: "entity.customer." + verb, AggregateType: "DDM_ENTITY", AggregateID: &id, Payload: raw}
}

// Fixed aggregates of the crafted sequences, checked by checkFoldRules.
var (
	foldNested   = uuid.MustParse("00000000-0000-4000-8000-000000000001") // nested merge, explicit null
	foldOwnTen   = uuid.MustParse("00000000-0000-4000-8000-000000000002") // the event sets the tenant field
	foldRevived  = uuid.MustParse("00000000-0000-4000-8000-000000000003") // deleted, then updated
	foldUnknown  = uuid.MustParse("00000000-0000-4000-8000-000000000004") // deleted, never created
	foldStale    = uuid.MustParse("00000000-0000-4000-8000-000000000005") // stale and repeated versions
	foldHot      = uuid.MustParse("00000000-0000-4000-8000-000000000006") // hundreds of events
	foldRecreate = uuid.MustParse("00000000-0000-4000-8000-000000000007") // deleted, then created again
)

// craftedSequences are the rules' corner cases, per aggregate in order;
// noTenant adds an aggregate whose events carry no tenant (shared only).
func craftedSequences(tenant string, noTenant bool) [][]outbox.Event {
	seqs := [][]outbox.Event{
		{
			foldEvent(foldNested, "created", 1, tenant, map[string]any{"name": "Ada", "address": map[string]any{"city": "Berlin", "street": "Main 1"}, "tags": []any{"a", "b"}}),
			foldEvent(foldNested, "updated", 2, tenant, map[string]any{"address": map[string]any{"city": "Wien"}}),
			foldEvent(foldNested, "viewed", 3, tenant, nil),
			foldEvent(foldNested, "updated", 3, tenant, map[string]any{"email": nil, "tags": []any{"c"}}),
		},
		{
			foldEvent(foldOwnTen, "created", 1, tenant, map[string]any{"name": "Own", "tenant_key": tenant + "-own"}),
			foldEvent(foldOwnTen, "updated", 2, tenant, map[string]any{"status": "active", "tenant_key": tenant + "-own"}),
		},
		{
			foldEvent(foldRevived, "created", 1, tenant, map[string]any{"name": "Rev", "status": "draft", "credit_limit": 10}),
			foldEvent(foldRevived, "deleted", 2, tenant, nil),
			foldEvent(foldRevived, "updated", 3, tenant, map[string]any{"status": "active"}),
		},
		{foldEvent(foldUnknown, "deleted", 4, tenant, nil)},
		{
			foldEvent(foldStale, "created", 1, tenant, map[string]any{"name": "Stale", "status": "draft"}),
			foldEvent(foldStale, "updated", 3, tenant, map[string]any{"status": "active"}),
			foldEvent(foldStale, "updated", 2, tenant, map[string]any{"status": "suspended"}),
			foldEvent(foldStale, "updated", 3, tenant, map[string]any{"status": "closed"}),
			foldEvent(foldStale, "created", 1, tenant, map[string]any{"name": "Stale again"}),
			foldEvent(foldStale, "updated", 4, tenant, map[string]any{"credit_limit": 40}),
		},
		{
			foldEvent(foldRecreate, "created", 1, tenant, map[string]any{"name": "First", "city": "Köln"}),
			foldEvent(foldRecreate, "deleted", 2, tenant, nil),
			foldEvent(foldRecreate, "created", 3, tenant, map[string]any{"name": "Second"}),
			foldEvent(foldRecreate, "updated", 4, tenant, map[string]any{"status": "active"}),
		},
	}
	hot := []outbox.Event{foldEvent(foldHot, "created", 1, tenant, map[string]any{"name": "Hot", "n": 0})}
	for v := 2; v <= 400; v++ {
		switch {
		case v%97 == 0:
			hot = append(hot, foldEvent(foldHot, "deleted", v, tenant, nil))
		case v%41 == 0:
			hot = append(hot, foldEvent(foldHot, "updated", v-5, tenant, map[string]any{"n": -v})) // stale
		default:
			hot = append(hot, foldEvent(foldHot, "updated", v, tenant, map[string]any{"n": v, fmt.Sprintf("f%d", v%7): v}))
		}
	}
	seqs = append(seqs, hot)
	if noTenant {
		id := uuid.MustParse("00000000-0000-4000-8000-000000000008")
		seqs = append(seqs, []outbox.Event{
			foldEvent(id, "created", 1, "", map[string]any{"name": "Nobody's"}),
			foldEvent(id, "updated", 2, "", map[string]any{"status": "active"}),
			foldEvent(id, "deleted", 3, "", nil),
		})
	}
	return seqs
}

// writeFoldSequences writes the crafted sequences interleaved (each
// aggregate in order) and then the realistic workload (hot keys, three
// tenants) with a stale copy of an earlier event of the same aggregate
// after every 25th event.
func (b *bundle) writeFoldSequences(shared bool) {
	b.t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	seqs := craftedSequences("acme", shared)
	var evs []outbox.Event
	for len(seqs) > 0 {
		i := rng.IntN(len(seqs))
		evs = append(evs, seqs[i][0])
		if seqs[i] = seqs[i][1:]; len(seqs[i]) == 0 {
			seqs = append(seqs[:i], seqs[i+1:]...)
		}
	}
	w := loadgen.Realistic()
	w.Events, w.Customers, w.Hot, w.Deletes = 3000, 300, 30, 0.05
	for i, e := range w.Make() {
		evs = append(evs, e)
		if i%25 == 24 {
			evs = append(evs, evs[len(evs)-1-rng.IntN(min(len(evs), 200))])
		}
	}
	for len(evs) > 0 {
		k := min(len(evs), 100)
		err := pgx.BeginFunc(b.ctx, b.db.Pool, func(tx pgx.Tx) error { _, err := b.writer.Write(b.ctx, tx, evs[:k]...); return err })
		if err != nil {
			b.t.Fatal(err)
		}
		evs = evs[k:]
	}
}

// deliverAll hands every event of the outbox, in id order, to a search
// consumer of def in batches of varying size, as a relay would, and
// requires each to be delivered (OK or stale).
func (b *bundle) deliverAll(def *mapping.Def) {
	b.t.Helper()
	cons, err := search.New(search.Config{Engine: b.eng, Projections: b.foldSet(def.Alias), Defs: mapping.Defs{def.Alias: def}})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := cons.EnsureIndexes(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id FROM aa_outbox_event ORDER BY id`)
	if err != nil {
		b.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		b.t.Fatal(err)
	}
	sizes := []int{1, 7, 50, 200, 13}
	for n := 0; len(ids) > 0; n++ {
		k := min(len(ids), sizes[n%len(sizes)])
		evs, err := b.eventsByID(ids[:k])
		if err != nil {
			b.t.Fatal(err)
		}
		for i, o := range cons.Deliver(b.ctx, evs) {
			if !o.Kind.Delivered() {
				b.t.Fatalf("event %d (%s) not delivered: %v %s", evs[i].ID, evs[i].EventType, o.Kind, o.Reason)
			}
		}
		ids = ids[k:]
	}
}

// eventsByID reads whole events, in id order.
func (b *bundle) eventsByID(ids []int64) ([]*outbox.Event, error) {
	rows, err := b.db.Pool.Query(b.ctx, eventsByIDSQL, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*outbox.Event
	for rows.Next() {
		e := &outbox.Event{}
		var tenant, agg, corr *uuid.UUID
		if err := rows.Scan(&e.ID, &tenant, &e.EventType, &e.SchemaVersion, &e.AggregateType, &agg, &corr, &e.Payload, &e.Status, &e.CreatedAt); err != nil {
			return nil, err
		}
		e.TenantID, e.AggregateID, e.CorrelationID = tenant, agg, corr
		out = append(out, e)
	}
	return out, rows.Err()
}

func (b *bundle) foldSet(alias string) *projections.Set {
	b.t.Helper()
	set := projections.NewSet()
	if err := set.AddFile("customers.yaml", []byte(fmt.Sprintf(foldProjectionFile, alias))); err != nil {
		b.t.Fatal(err)
	}
	return set
}

// physical returns the index behind def's alias (of tenant in per_tenant
// mode).
func (b *bundle) physical(def *mapping.Def, tenant string) string {
	b.t.Helper()
	alias := def.Alias
	if tenant != "" {
		alias, _ = def.TenantAlias(tenant)
	}
	targets, err := b.eng.AliasTargets(b.ctx, alias)
	if err != nil || len(targets) != 1 {
		b.t.Fatalf("alias %s: %v %v", alias, targets, err)
	}
	return targets[0]
}

// replayInto creates def's index (of tenant) and fills it from the whole
// outbox with the replay alone (no seed), in chunks of 64 events.
func (b *bundle) replayInto(def *mapping.Def, tenant string) string {
	b.t.Helper()
	d := def
	if tenant != "" {
		d, _ = def.ForTenant(tenant)
	}
	st, err := mapping.Ensure(b.ctx, b.eng, d)
	if err != nil {
		b.t.Fatal(err)
	}
	cfg := b.config(def)
	cfg.Projections, cfg.Tenant, cfg.ChunkSize = b.foldSet(def.Alias), tenant, 64
	r, err := New(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	r.target = st.Index
	if err := r.replay(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	return st.Index
}

// checkFoldRules checks a few documents of the crafted sequences against
// the rules themselves, so that the two paths are not merely alike.
func (b *bundle) checkFoldRules(index string, deletes mapping.DeleteMode, tenancy mapping.TenancyMode) {
	b.t.Helper()
	ids := []string{foldNested.String(), foldOwnTen.String(), foldRevived.String(), foldUnknown.String(), foldStale.String(), foldRecreate.String()}
	docs, err := b.eng.MGet(b.ctx, index, ids)
	if err != nil {
		b.t.Fatal(err)
	}
	src := func(id uuid.UUID) map[string]any {
		m, _ := projections.Decode(docs[id.String()].Source)
		return m
	}
	want := func(id uuid.UUID, version int64, fields map[string]any) {
		b.t.Helper()
		d, ok := docs[id.String()]
		if !ok {
			b.t.Errorf("%s: document %s missing", index, id)
			return
		}
		if d.Version != version {
			b.t.Errorf("%s: document %s at version %d, want %d", index, id, d.Version, version)
		}
		got := src(id)
		for k, v := range fields {
			g, _ := projections.Lookup(got, k)
			if fmt.Sprint(g) != fmt.Sprint(v) {
				b.t.Errorf("%s: document %s: %s = %v, want %v (%v)", index, id, k, g, v, got)
			}
		}
	}
	tenantKey := any("acme")
	if tenancy == mapping.TenancyPerTenant {
		tenantKey = nil // the tenant is the index
	}
	soft := deletes == mapping.DeleteSoft
	want(foldNested, 3, map[string]any{"address.city": "Wien", "address.street": "Main 1", "name": "Ada", "tags": []any{"c"}, "tenant_key": tenantKey})
	if _, ok := src(foldNested)["email"]; !ok {
		b.t.Errorf("%s: an explicit null did not set email", index)
	}
	want(foldOwnTen, 2, map[string]any{"tenant_key": "acme-own", "status": "active"})
	want(foldStale, 4, map[string]any{"status": "active", "name": "Stale", "credit_limit": 40})
	want(foldRecreate, 4, map[string]any{"name": "Second", "city": nil, "status": "active"})
	if soft {
		want(foldRevived, 3, map[string]any{"name": "Rev", "status": "active", "deleted": false})
		want(foldUnknown, 4, map[string]any{"deleted": true, "tenant_key": tenantKey})
	} else {
		want(foldRevived, 3, map[string]any{"name": nil, "status": "active", "credit_limit": nil})
		if _, ok := docs[foldUnknown.String()]; ok {
			b.t.Errorf("%s: a hard delete of an unknown document wrote one", index)
		}
	}
}
