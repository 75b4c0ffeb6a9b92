package reindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/search"
)

func wantsCustomer(et, at string) bool {
	return strings.HasPrefix(et, "entity.customer.") && at == "DDM_ENTITY"
}

// startRelay runs a relay with the real search consumer (dual writes on)
// for the bundle's alias, plus a second search consumer that keeps a
// reference alias with the old definition: what the live index would hold
// had there been no reindex.
func (b *bundle) startRelay(def *mapping.Def, ref *mapping.Def) (stop func()) {
	b.t.Helper()
	cons, err := search.New(search.Config{Name: "search", Engine: b.eng, Projections: b.set,
		Defs: mapping.Defs{b.alias: def}, DualWrites: NewTargets(b.db.Pool)})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := cons.EnsureIndexes(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	routes := []relay.Route{{Consumer: cons, Match: wantsCustomer}}
	if ref != nil {
		refSet := b.refSet(ref.Alias)
		rc, err := search.New(search.Config{Name: "reference", Engine: b.eng, Projections: refSet, Defs: mapping.Defs{ref.Alias: ref}})
		if err != nil {
			b.t.Fatal(err)
		}
		if _, err := rc.EnsureIndexes(b.ctx); err != nil {
			b.t.Fatal(err)
		}
		routes = append(routes, relay.Route{Consumer: rc, Match: wantsCustomer})
	}
	r, err := relay.New(b.db.Pool, relay.Config{Schema: b.db.Schema, Partitions: 4, LeaseTTL: 3 * time.Second,
		PollInterval: 50 * time.Millisecond, BatchSize: 200, Logger: slog.New(slog.DiscardHandler), Routes: routes})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	b.t.Cleanup(stop)
	return stop
}

func (b *bundle) refSet(alias string) *projections.Set {
	b.t.Helper()
	return newProjectionSet(b.t, alias)
}

// probe searches the alias every few milliseconds for a fixed set of
// documents that no one deletes, and records every error and every answer
// that misses one of them.
type probe struct {
	searches, failures atomic.Int64
	mu                 sync.Mutex
	first              []string
}

func (b *bundle) startProbe(ids []string) (*probe, func()) {
	p := &probe{}
	body, _ := json.Marshal(map[string]any{"size": len(ids), "_source": false, "query": map[string]any{"ids": map[string]any{"values": ids}}})
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			res, err := b.eng.Search(ctx, b.alias, body)
			if ctx.Err() != nil {
				return
			}
			p.searches.Add(1)
			var msg string
			switch {
			case err != nil:
				msg = err.Error()
			case res.Total != int64(len(ids)):
				msg = fmt.Sprintf("%d of %d probe documents found", res.Total, len(ids))
			}
			if msg != "" {
				p.failures.Add(1)
				p.mu.Lock()
				if len(p.first) < 5 {
					p.first = append(p.first, time.Now().Format("15:04:05.000")+" "+msg)
				}
				p.mu.Unlock()
			}
		}
	}()
	return p, func() { cancel(); <-done }
}

// probeCustomers writes n customers that the load generator never touches.
func (b *bundle) probeCustomers(n int) []string {
	b.t.Helper()
	g := loadgen.New(7)
	g.Tenant = "probe"
	evs := make([]outbox.Event, n)
	ids := make([]string, n)
	for i := range evs {
		evs[i] = g.Create()
		ids[i] = evs[i].AggregateID.String()
	}
	if err := pgx.BeginFunc(b.ctx, b.db.Pool, func(tx pgx.Tx) error { _, err := b.writer.Write(b.ctx, tx, evs...); return err }); err != nil {
		b.t.Fatal(err)
	}
	return ids
}

func (b *bundle) undelivered() int64 {
	var n int64
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM aa_outbox_event WHERE status = 'pending'`).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *bundle) dispatched() int64 {
	var n int64
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM aa_outbox_event WHERE status = 'dispatched'`).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *bundle) jobState(alias string) (state string, prog Progress, res *Result) {
	b.t.Helper()
	var pr, rr []byte
	err := b.db.Pool.QueryRow(b.ctx, `SELECT state, progress, result FROM aa_job WHERE job_kind = 'reindex' AND job_key = $1 ORDER BY id DESC LIMIT 1`, alias).Scan(&state, &pr, &rr)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", prog, nil
	}
	if err != nil {
		b.t.Fatal(err)
	}
	_ = json.Unmarshal(pr, &prog)
	if rr != nil {
		res = &Result{}
		_ = json.Unmarshal(rr, res)
	}
	return state, prog, res
}

// The demonstration, under load through the real relay and search
// consumer: a mapping change; a reindex that is aborted (everything stays as
// it was); a reindex killed with SIGKILL midway and resumed; a probe that
// searches the alias every 5 ms sees no error and no missing document
// throughout; after the swap every document equals the reference (what the
// live index holds, kept by a second consumer) and the generator's truth.
func TestReindexUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	def1 := b.def(nil)
	ref := b.def(nil)
	ref.Alias = b.alias + "_ref"
	t.Cleanup(func() { _ = b.eng.DeleteIndex(context.Background(), mapping.PhysicalName(ref.Alias, 1)) })
	stopRelay := b.startRelay(def1, ref)

	probeIDs := b.probeCustomers(50)
	loadCtx, stopLoad := context.WithCancel(b.ctx)
	loadDone := make(chan error, 1)
	go func() {
		_, err := loadgen.Steady(loadCtx, b.db.Pool, b.writer, b.gen, 150, 10, 2*time.Second, 8)
		loadDone <- err
	}()
	defer stopLoad()
	testenv.Eventually(t, 3*time.Minute, func() bool { return b.dispatched() >= 2500 }, "2500 events delivered")
	removed := b.compact(0.4)
	t.Logf("compaction removed %d delivered events", removed)
	p, stopProbe := b.startProbe(probeIDs)

	def2 := b.def(emailAsText)
	v1 := mapping.PhysicalName(b.alias, 1)

	// 1. Abort midway: the target goes, the alias and the live index stay.
	cfg := b.config(def2)
	cfg.ChunkSize, cfg.Concurrency, cfg.Wants = 100, 1, wantsCustomer
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.slow = 100 * time.Millisecond // a pause per chunk, so that the abort lands mid-replay
	runErr := make(chan error, 1)
	go func() { _, err := r.Run(b.ctx); runErr <- err }()
	testenv.Eventually(t, time.Minute, func() bool {
		_, prog, _ := b.jobState(b.alias)
		return prog.Phase == PhaseReplay && prog.LastID > 0
	}, "the first reindex replays")
	target, err := Abort(b.ctx, b.db.Pool, b.eng, b.alias, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-runErr; !errors.Is(err, ErrLost) {
		t.Fatalf("aborted run: %v", err)
	}
	if info, _ := b.eng.GetIndex(b.ctx, target); info != nil {
		t.Fatalf("aborted target %s still exists", target)
	}
	if st, _, _ := b.jobState(b.alias); st != "aborted" {
		t.Fatalf("job state %q after abort", st)
	}
	if tg, _ := b.eng.AliasTargets(b.ctx, b.alias); len(tg) != 1 || tg[0] != v1 {
		t.Fatalf("alias after abort: %v", tg)
	}
	time.Sleep(2 * TargetsTTL) // live writes keep flowing to v1 only; v2 must not come back
	if info, _ := b.eng.GetIndex(b.ctx, target); info != nil {
		t.Fatalf("aborted target %s was re-created by a late write", target)
	}

	// 2. A reindex in another process, killed with SIGKILL while replaying.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperReindexProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "REINDEX_HELPER=1", "REINDEX_DB="+b.db.URL, "REINDEX_SCHEMA="+b.db.Schema,
		"REINDEX_ENGINE="+b.ecfg.URLs[0], "REINDEX_ALIAS="+b.alias)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() bool {
		st, prog, _ := b.jobState(b.alias)
		return st == "running" && prog.Phase == PhaseReplay && prog.LastID > 0
	}, "the child reindex replays")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	st, prog, _ := b.jobState(b.alias)
	t.Logf("killed the child at phase %s, last id %d (watermark %d)", prog.Phase, prog.LastID, prog.Watermark)
	if st != "running" {
		t.Fatalf("job %q after SIGKILL; child output:\n%s", st, out.String())
	}
	// A new run refuses while the heartbeat is fresh, then resumes.
	cfg = b.config(def2)
	cfg.Wants = wantsCustomer
	cfg.StaleAfter = 3 * time.Second
	var res *Result
	testenv.Eventually(t, time.Minute, func() bool {
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err = r.Run(b.ctx)
		var re *RunningError
		if errors.As(err, &re) {
			return false
		}
		if err != nil {
			t.Fatalf("resumed run: %v", err)
		}
		return true
	}, "the interrupted reindex resumes")
	v3 := res.NewIndex
	if res.NewIndex == v1 || res.OldIndex != v1 || !res.Verify.OK {
		t.Fatalf("result %+v\n%s", res, res.Verify)
	}
	t.Logf("resumed and swapped: %s", res.Verify)

	// Load goes on a little through the new index, then stops and drains.
	n0 := b.dispatched()
	testenv.Eventually(t, time.Minute, func() bool { return b.dispatched() > n0+300 }, "events delivered after the swap")
	stopLoad()
	if err := <-loadDone; err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() bool { return b.undelivered() == 0 }, "the outbox drained")
	stopProbe()
	stopRelay()
	b.logDeliveryLag()
	t.Logf("probe: %d searches, %d failures %v", p.searches.Load(), p.failures.Load(), p.first)
	if p.failures.Load() > 0 || p.searches.Load() < 100 {
		t.Fatalf("probe: %d searches, %d failures: %v", p.searches.Load(), p.failures.Load(), p.first)
	}
	if tg, _ := b.eng.AliasTargets(b.ctx, b.alias); len(tg) != 1 || tg[0] != v3 {
		t.Fatalf("alias after the reindex: %v", tg)
	}
	b.compareWith(v3, mapping.PhysicalName(ref.Alias, 1))
	b.checkTruthPlus(v3, len(probeIDs))
}

// logDeliveryLag logs how long the relay took from commit to dispatch (a
// relay far behind is what the reindex's check has to wait for).
func (b *bundle) logDeliveryLag() {
	b.t.Helper()
	var p50, p99, most float64
	err := b.db.Pool.QueryRow(b.ctx, `
SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY s), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY s), 0), coalesce(max(s), 0)
FROM (SELECT extract(epoch FROM dispatched_at - created_at)::float8 AS s FROM aa_outbox_event WHERE status = 'dispatched') d`).Scan(&p50, &p99, &most)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("delivery lag (commit to dispatch): p50 %.3fs, p99 %.3fs, max %.3fs", p50, p99, most)
}

// compareWith requires every document (tombstones included) of a to equal
// b's: same ids, versions and sources.
func (b *bundle) compareWith(a, ref string) {
	b.t.Helper()
	for _, ix := range []string{a, ref} {
		if err := b.eng.Refresh(b.ctx, ix); err != nil {
			b.t.Fatal(err)
		}
	}
	adm := b.eng.(indexer.Admin)
	read := func(ix string) map[string]indexer.ScrollHit {
		out := map[string]indexer.ScrollHit{}
		if err := adm.Scroll(b.ctx, ix, nil, 1000, indexer.WholeSource, func(_ int64, hits []indexer.ScrollHit) error {
			for _, h := range hits {
				out[h.ID] = h
			}
			return nil
		}); err != nil {
			b.t.Fatal(err)
		}
		return out
	}
	got, want := read(a), read(ref)
	bad, dropped := 0, 0
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			// Tombstones whose every event was compacted are dropped on
			// purpose; any other document must be there.
			var m map[string]any
			_ = json.Unmarshal(w.Source, &m)
			var events int
			if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM aa_outbox_event WHERE aggregate_id = $1`, id).Scan(&events); err != nil {
				b.t.Fatal(err)
			}
			if m["deleted"] == true && events == 0 {
				dropped++
				continue
			}
			b.t.Errorf("%s: document %s (v%d, %d retained events) of the reference is missing", a, id, w.Version, events)
			bad++
		case g.Version != w.Version:
			b.t.Errorf("%s: document %s has version %d, the reference %d", a, id, g.Version, w.Version)
			bad++
		default:
			if d := sourceDiff(w.Source, g.Source, nil); d != "" {
				b.t.Errorf("%s: document %s differs from the reference: %s", a, id, d)
				if bad == 0 {
					b.dumpAggregate(id, g, w)
				}
				bad++
			}
		}
		if bad > 10 {
			b.t.Fatal("too many differences")
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			var m map[string]any
			_ = json.Unmarshal(got[id].Source, &m)
			b.t.Errorf("%s: document %s is not in the reference", a, id)
		}
	}
	b.t.Logf("%s equals the reference %s: %d documents (%d tombstones of compacted deletes dropped)", a, ref, len(want), dropped)
}

// checkTruthPlus is checkTruth with extra (probe) documents in the count.
func (b *bundle) checkTruthPlus(index string, extra int) {
	b.t.Helper()
	live := b.gen.Live()
	n, err := b.eng.Count(b.ctx, b.alias, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	if n != int64(len(live)+extra) {
		b.t.Errorf("alias counts %d documents, want %d live customers + %d probe documents", n, len(live), extra)
	}
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
	for _, c := range live {
		d, ok := docs[c.ID.String()]
		if !ok || d.Version != c.Version {
			b.t.Fatalf("customer %s: found %v, version %d, want %d", c.ID, ok, d.Version, c.Version)
		}
	}
}

// TestHelperReindexProcess is the child process of TestReindexUnderLoad
// (the os/exec helper-process pattern): it runs a slow reindex until it is
// killed. Run as an ordinary test, without REINDEX_HELPER, it does nothing.
func TestHelperReindexProcess(t *testing.T) {
	if os.Getenv("REINDEX_HELPER") != "1" {
		return
	}
	ctx := context.Background()
	ecfg := indexer.Config{URLs: []string{os.Getenv("REINDEX_ENGINE")}}
	eng, err := indexer.New(ecfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := testenv.Pool(t, os.Getenv("REINDEX_DB"), os.Getenv("REINDEX_SCHEMA"))
	b := &bundle{t: t, ctx: ctx, alias: os.Getenv("REINDEX_ALIAS"), eng: eng, ecfg: ecfg}
	b.set = newProjectionSet(t, b.alias)
	cfg := Config{Pool: pool, Engine: eng, Def: b.def(emailAsText), Projections: b.set, Wants: wantsCustomer,
		Heartbeat: 200 * time.Millisecond, ChunkSize: 50, BulkSize: 50, Concurrency: 1, Logger: testLogger(t)}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.slow = 100 * time.Millisecond
	_, err = r.Run(ctx)
	t.Fatalf("the helper reindex was not killed: %v", err)
}

func (b *bundle) dumpAggregate(id string, got, want indexer.ScrollHit) {
	b.t.Logf("new: v%d %s", got.Version, got.Source)
	b.t.Logf("ref: v%d %s", want.Version, want.Source)
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id, event_type, status::text, payload->>'version', payload->'after' FROM aa_outbox_event WHERE aggregate_id = $1 ORDER BY id`, id)
	if err != nil {
		b.t.Log(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var eid int64
		var et, st string
		var v *string
		var after json.RawMessage
		_ = rows.Scan(&eid, &et, &st, &v, &after)
		b.t.Logf("event %d %s %s v%v %s", eid, et, st, *v, after)
	}
}
