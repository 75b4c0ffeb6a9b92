package reindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

// projectionWithRef is projectionFile with a field the projection gained:
// entity_ref, from the payload's entity_id.
const projectionWithRef = projectionFile + `      - {from: entity_id, to: entity_ref, type: keyword}
`

// sourceTable creates the platform table of the tests (customer_src in the
// test's schema) holding the generator's live customers at their versions,
// and returns the backfill source over it.
func (b *bundle) sourceTable(chunk int) backfill.Source {
	b.t.Helper()
	if _, err := b.db.Pool.Exec(b.ctx, `CREATE TABLE customer_src (id uuid PRIMARY KEY, code text NOT NULL, version bigint NOT NULL, state jsonb NOT NULL)`); err != nil {
		b.t.Fatal(err)
	}
	type row struct {
		ID      uuid.UUID      `json:"id"`
		Code    string         `json:"code"`
		Version int64          `json:"version"`
		State   map[string]any `json:"state"`
	}
	var rows []row
	for _, c := range b.gen.Live() {
		rows = append(rows, row{c.ID, c.Code, c.Version, c.State})
	}
	raw, _ := json.Marshal(rows)
	if _, err := b.db.Pool.Exec(b.ctx, `INSERT INTO customer_src
SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, code text, version bigint, state jsonb)`, raw); err != nil {
		b.t.Fatal(err)
	}
	return backfill.Source{
		Name: "customers",
		Query: `SELECT s.id AS aggregate_id, 'entity.customer.snapshot' AS event_type,
       jsonb_build_object('tenant_key', 'public', 'entity_type', 'customer', 'entity_id', s.id::text,
                          'code', s.code, 'version', s.version, 'after', s.state) AS payload
FROM ` + b.db.Schema + `.customer_src s`,
		ChunkSize: chunk,
	}
}

// count counts the documents of index matching query (nil: all).
func (b *bundle) count(index string, query map[string]any) int64 {
	b.t.Helper()
	var body json.RawMessage
	if query != nil {
		body, _ = json.Marshal(map[string]any{"query": query})
	}
	n, err := b.eng.Count(b.ctx, index, body)
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// The projection gained a field after compaction removed most of the
// history: seeded from the live index, the documents whose events were
// compacted would never get it. Seeded from the backfill source, every
// document has it, the check compares with the source's rows, and the
// documents equal the truth. The dry run says what would be read.
func TestSeedFromSourceReachesCompactedDocuments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(1500)
	b.dispatchAll()
	def := b.def(nil)
	live := b.buildLive(def)
	src := b.sourceTable(200)
	if n := b.compact(0.9); n == 0 {
		t.Fatal("compaction removed nothing")
	}
	want := int64(len(b.gen.Live()))
	if n := b.count(live, map[string]any{"exists": map[string]any{"field": "entity_ref"}}); n != 0 {
		t.Fatalf("the live index has %d documents with entity_ref before the projection gained it", n)
	}

	set := projections.NewSet()
	if err := set.AddFile("customers.yaml", []byte(fmt.Sprintf(projectionWithRef, b.alias))); err != nil {
		t.Fatal(err)
	}
	cfg := b.config(def)
	cfg.Projections, cfg.Force, cfg.SeedSource = set, true, &src

	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := r.DryRun(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Seed != "source:customers" || plan.DocsToSeed != want || plan.Source != live {
		t.Fatalf("dry run: seed %q, docs to seed %d, live %s; want source:customers, %d, %s", plan.Seed, plan.DocsToSeed, plan.Source, want, live)
	}

	r, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Verify
	if !rep.OK || rep.SeedSource != "customers" || rep.SourceRows != want || rep.NewTotal != want || rep.SourceLeftOut != 0 {
		t.Fatalf("check: %+v; want ok against source customers with %d rows and documents", rep, want)
	}
	if res.Progress.DocsSeeded != want || res.Progress.SeedKey == nil || !res.Progress.SeedDone {
		t.Fatalf("progress: seeded %d (key %v, done %v), want %d", res.Progress.DocsSeeded, res.Progress.SeedKey, res.Progress.SeedDone, want)
	}
	b.checkTruth(res.NewIndex)
	if n := b.count(b.alias, map[string]any{"bool": map[string]any{"must_not": map[string]any{"exists": map[string]any{"field": "entity_ref"}}}}); n != 0 {
		t.Fatalf("%d documents of %s lack the new field entity_ref", n, b.alias)
	}
	if n := b.count(b.alias, nil); n != want {
		t.Fatalf("%s counts %d documents, the source has %d rows", b.alias, n, want)
	}
}

// A row deleted (hard delete) after the seed read it and before the seed
// wrote it: the seed writes the older state, the replay writes the
// retained delete event, which is newer, so the document does not come
// back. The check compares with the source's rows after the delete.
func TestSeedFromSourceDeleteDuringSeedStaysDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(600)
	b.dispatchAll()
	def := b.def(nil)
	def.DeleteMode = mapping.DeleteHard
	b.buildLive(def)
	src := b.sourceTable(100)
	want := int64(len(b.gen.Live()))

	cfg := b.config(def)
	cfg.Force, cfg.SeedSource = true, &src
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		once    sync.Once
		deleted uuid.UUID
	)
	r.hooks.beforeSeedWrite = func(rows []backfill.Row) {
		once.Do(func() {
			row := rows[len(rows)/2]
			deleted = *row.Event.AggregateID
			var p struct {
				Version int64 `json:"version"`
			}
			_ = json.Unmarshal(row.Event.Payload, &p)
			// The platform deletes the row and writes its event in one
			// transaction; the relay delivers it (dispatched).
			err := pgx.BeginFunc(b.ctx, b.db.Pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(b.ctx, `DELETE FROM customer_src WHERE id = $1`, deleted); err != nil {
					return err
				}
				_, err := b.writer.Write(b.ctx, tx, []outbox.Event{foldEvent(deleted, "deleted", int(p.Version)+1, "public", map[string]any{})}...)
				return err
			})
			if err == nil {
				_, err = b.db.Pool.Exec(b.ctx, `UPDATE aa_outbox_event SET status = 'dispatched', dispatched_at = now() WHERE aggregate_id = $1`, deleted)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	res, err := r.Run(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if deleted == uuid.Nil {
		t.Fatal("the hook never ran")
	}
	if res.Progress.DocsSeeded != want {
		t.Fatalf("seeded %d documents, want %d (the deleted row was read before its delete)", res.Progress.DocsSeeded, want)
	}
	docs, err := b.eng.MGet(b.ctx, res.NewIndex, []string{deleted.String()})
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := docs[deleted.String()]; ok {
		t.Fatalf("the deleted customer %s came back in %s (v%d): %s", deleted, res.NewIndex, d.Version, d.Source)
	}
	if !res.Verify.OK || res.Verify.SourceRows != want-1 || res.Verify.NewTotal != want-1 {
		t.Fatalf("check: %+v; want ok with %d rows and documents", res.Verify, want-1)
	}
}

// A seed from the source stopped before the writes of its third chunk
// records the last key of the second; the resumed run reads after it (no
// row twice, none left out), refuses another --seed, and finishes complete.
func TestSeedFromSourceResumesAfterTheLastKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(1500)
	b.dispatchAll()
	def := b.def(nil)
	b.buildLive(def)
	src := b.sourceTable(40)
	want := int64(len(b.gen.Live()))
	if want <= 3*40 {
		t.Fatalf("%d live customers: too few for three chunks of 40", want)
	}
	cfg := b.config(def)
	cfg.Force, cfg.SeedSource = true, &src

	r1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(b.ctx)
	defer stop()
	var (
		calls   int
		lastKey string // of the second chunk
	)
	r1.hooks.beforeSeedWrite = func(rows []backfill.Row) {
		calls++
		switch calls {
		case 2:
			lastKey = rows[len(rows)-1].Key
		case 3:
			stop() // as a SIGINT would: the job stays running, to be resumed
		}
	}
	if _, err := r1.Run(runCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped run: %v, want context.Canceled", err)
	}
	j, _, err := Running(b.ctx, b.db.Pool, b.alias)
	if err != nil {
		t.Fatal(err)
	}
	if j.Params.Seed != "source:customers" || j.Progress.SeedKey == nil || *j.Progress.SeedKey != lastKey || j.Progress.DocsSeeded != 80 || j.Progress.SeedDone {
		t.Fatalf("stopped job: seed %q, key %v, seeded %d, done %v; want source:customers, %s, 80, false",
			j.Params.Seed, j.Progress.SeedKey, j.Progress.DocsSeeded, j.Progress.SeedDone, lastKey)
	}
	testenv.Eventually(t, time.Minute, func() bool {
		_, age, err := Running(b.ctx, b.db.Pool, b.alias)
		return err == nil && age > cfg.StaleAfter
	}, "the heartbeat of the stopped run goes stale")

	other := cfg
	other.SeedSource = nil
	ro, err := New(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Run(b.ctx); err == nil || !strings.Contains(err.Error(), "--seed source:customers") {
		t.Fatalf("resuming with --seed index: %v, want a refusal naming --seed source:customers", err)
	}

	r2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var firstKey string
	r2.hooks.beforeSeedWrite = func(rows []backfill.Row) {
		if firstKey == "" {
			firstKey = rows[0].Key
		}
	}
	res, err := r2.Run(b.ctx)
	if err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	if !r2.job.Resumed || firstKey <= lastKey {
		t.Fatalf("resumed run: resumed %v, first key written %s, want one after %s", r2.job.Resumed, firstKey, lastKey)
	}
	if res.Progress.DocsSeeded != want || !res.Verify.OK {
		t.Fatalf("resumed run: seeded %d, want %d; check %+v", res.Progress.DocsSeeded, want, res.Verify)
	}
	b.checkTruth(b.alias)
}
