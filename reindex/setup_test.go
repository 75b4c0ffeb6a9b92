package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

// projectionFile is the customer projection of the example, writing to the
// alias named by %s.
const projectionFile = `
projections:
  - name: customer
    event_types: ["entity.customer.*"]
    aggregate_types: [DDM_ENTITY]
    index: %s
    copy_all_of_after: true
    fields:
      - {from: code, to: code, type: keyword}
      - {from: tenant_key, type: keyword}
      - {from: entity_type, type: keyword}
      - {from: actor.principal_id, to: updated_by, type: keyword}
      - {from: "@event_type", to: last_event}
`

// bundle is one test's world: its schema, its alias, the engine.
type bundle struct {
	t      testing.TB
	ctx    context.Context
	db     *testenv.DB
	eng    indexer.Engine
	ecfg   indexer.Config
	alias  string
	set    *projections.Set
	gen    *loadgen.Generator
	writer *outbox.Writer
}

func newProjectionSet(t testing.TB, alias string) *projections.Set {
	t.Helper()
	set := projections.NewSet()
	if err := set.AddFile("customers.yaml", []byte(fmt.Sprintf(projectionFile, alias))); err != nil {
		t.Fatal(err)
	}
	return set
}

func setup(t testing.TB) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	b := &bundle{t: t, ctx: ctx, db: testenv.NewDB(t), alias: testenv.Name("rx"), gen: loadgen.New(uint64(time.Now().UnixNano()))}
	b.ecfg = indexer.Config{URLs: []string{testenv.EngineURL(t)}}
	eng, err := indexer.New(b.ecfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.eng = eng
	b.set = newProjectionSet(t, b.alias)
	b.writer = outbox.NewWriter(outbox.WriterConfig{Schema: b.db.Schema})
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for n := 1; n <= 12; n++ {
			_ = eng.DeleteIndex(c, mapping.PhysicalName(b.alias, n))
		}
	})
	return b
}

// def returns the example customers definition for the bundle's alias;
// change, when set, edits its mappings (a mapping change).
func (b *bundle) def(change func(props map[string]any)) *mapping.Def {
	b.t.Helper()
	data, err := os.ReadFile("../mapping/defs/customers.json")
	if err != nil {
		b.t.Fatal(err)
	}
	d, err := mapping.Parse("customers.json", data)
	if err != nil {
		b.t.Fatal(err)
	}
	d.Alias = b.alias
	if change != nil {
		change(d.Mappings["properties"].(map[string]any))
	}
	return d
}

// emailAsText is the mapping change of the tests: email becomes a text field
// with a keyword sub-field.
func emailAsText(props map[string]any) {
	props["email"] = map[string]any{"type": "text", "fields": map[string]any{"raw": map[string]any{"type": "keyword"}}}
}

// write writes n events of the generator's mix (in transactions of 50) and
// returns the last id.
func (b *bundle) write(n int) {
	b.t.Helper()
	for n > 0 {
		k := min(n, 50)
		evs := make([]outbox.Event, 0, k)
		for i := 0; i < k; i++ {
			evs = append(evs, b.gen.Next())
		}
		if n%7 == 0 {
			evs = append(evs, b.gen.Burst(3)...)
		}
		err := pgx.BeginFunc(b.ctx, b.db.Pool, func(tx pgx.Tx) error { _, err := b.writer.Write(b.ctx, tx, evs...); return err })
		if err != nil {
			b.t.Fatal(err)
		}
		n -= k
	}
}

// dispatchAll marks every event dispatched (as a relay would have).
func (b *bundle) dispatchAll() {
	b.t.Helper()
	if _, err := b.db.Pool.Exec(b.ctx, `UPDATE aa_outbox_event SET status = 'dispatched', dispatched_at = now() WHERE status = 'pending'`); err != nil {
		b.t.Fatal(err)
	}
}

// compact deletes the dispatched events with an id up to the given share
// of the outbox, as the outbox_compact job would after the retention.
func (b *bundle) compact(share float64) int64 {
	b.t.Helper()
	var lo, hi int64
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT min(id), max(id) FROM aa_outbox_event`).Scan(&lo, &hi); err != nil {
		b.t.Fatal(err)
	}
	upto := lo + int64(float64(hi-lo)*share)
	tag, err := b.db.Pool.Exec(b.ctx, `DELETE FROM aa_outbox_event WHERE id <= $1 AND status = 'dispatched'`, upto)
	if err != nil {
		b.t.Fatal(err)
	}
	return tag.RowsAffected()
}

func (b *bundle) config(def *mapping.Def) Config {
	return Config{
		Pool: b.db.Pool, Engine: b.eng, Def: def, Projections: b.set,
		Heartbeat: 200 * time.Millisecond, StaleAfter: 2 * time.Second, ChunkSize: 500, BulkSize: 500,
		Logger: testLogger(b.t),
	}
}

// buildLive creates generation 1 of the alias and fills it from the whole
// outbox with the replay (standing in for the search consumer when the test
// runs no relay).
func (b *bundle) buildLive(def *mapping.Def) string {
	b.t.Helper()
	st, err := mapping.Ensure(b.ctx, b.eng, def)
	if err != nil {
		b.t.Fatal(err)
	}
	r, err := New(b.config(def))
	if err != nil {
		b.t.Fatal(err)
	}
	r.target = st.Index
	if err := r.replay(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	if err := b.eng.Refresh(b.ctx, st.Index); err != nil {
		b.t.Fatal(err)
	}
	return st.Index
}

// checkTruth compares every document behind the alias with the generator's
// state: each live customer present with its version and fields, nothing else.
func (b *bundle) checkTruth(index string) {
	b.t.Helper()
	if err := b.eng.Refresh(b.ctx, index); err != nil {
		b.t.Fatal(err)
	}
	live := b.gen.Live()
	ids := make([]string, len(live))
	for i, c := range live {
		ids[i] = c.ID.String()
	}
	docs := map[string]indexer.Doc{}
	for i := 0; i < len(ids); i += 1000 {
		m, err := b.eng.MGet(b.ctx, index, ids[i:min(i+1000, len(ids))])
		if err != nil {
			b.t.Fatal(err)
		}
		for k, v := range m {
			docs[k] = v
		}
	}
	bad := 0
	for _, c := range live {
		d, ok := docs[c.ID.String()]
		if !ok {
			b.t.Errorf("%s: customer %s (v%d) missing", index, c.ID, c.Version)
			bad++
		} else {
			var m map[string]any
			_ = json.Unmarshal(d.Source, &m)
			if d.Version != c.Version {
				b.t.Errorf("%s: customer %s: version %d, want %d", index, c.ID, d.Version, c.Version)
				bad++
			}
			for k, v := range c.State {
				if fmt.Sprint(m[k]) != fmt.Sprint(v) {
					b.t.Errorf("%s: customer %s: %s = %v, want %v", index, c.ID, k, m[k], v)
					bad++
					break
				}
			}
			if m["deleted"] == true {
				b.t.Errorf("%s: customer %s is a tombstone", index, c.ID)
				bad++
			}
		}
		if bad > 10 {
			b.t.Fatal("too many differences")
		}
	}
	n, err := b.eng.Count(b.ctx, b.alias, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	if n != int64(len(live)) {
		b.t.Errorf("alias %s counts %d documents, the generator has %d live customers", b.alias, n, len(live))
	}
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
