package reindex

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

func testLevel() slog.Level {
	if os.Getenv("REINDEX_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: testLevel()}))
}

// A mapping change after compaction removed most of the history: the new
// index is seeded from the live one, the retained events are replayed, the
// check passes, the alias moves, and every document equals the truth.
func TestReindexAfterCompaction(t *testing.T) {
	t.Parallel()
	for _, client := range []bool{false, true} {
		name := "server_side_seed"
		if client {
			name = "client_seed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reindexAfterCompaction(t, client)
		})
	}
}

func reindexAfterCompaction(t *testing.T, clientSeed bool) {
	b := setup(t)
	b.write(3000)
	b.dispatchAll()
	old := b.buildLive(b.def(nil))
	b.checkTruth(b.alias)
	removed := b.compact(0.6)
	t.Logf("compaction removed %d events", removed)
	b.write(600) // history after the compaction
	b.dispatchAll()
	// The "consumer" applies the new events to the live index too.
	live, _ := New(b.config(b.def(nil)))
	live.target = old
	live.update(func(p *Progress) { p.LastID = 0 })
	if err := live.replay(b.ctx); err != nil {
		t.Fatal(err)
	}

	def := b.def(emailAsText)
	cfg := b.config(def)
	cfg.ClientSeed = clientSeed
	st, err := mapping.Check(b.ctx, b.eng, def)
	if err != nil || !st.Drift || !strings.Contains(st.Message(), "searchsync reindex "+b.alias) {
		t.Fatalf("drift not reported with the command: %+v %v", st, err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := r.DryRun(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Target != mapping.PhysicalName(b.alias, 2) || plan.DocsToSeed == 0 || plan.EventsToReplay == 0 || len(plan.MappingChanges) != 1 || plan.MappingChanges[0] != "email" {
		t.Fatalf("dry run: %+v", plan)
	}
	t.Logf("dry run: %+v", plan)
	res, err := r.Run(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.OldIndex != old || res.NewIndex != plan.Target || !res.Verify.OK || res.Verify.Compared == 0 {
		t.Fatalf("result: %+v\n%s", res, res.Verify)
	}
	targets, _ := b.eng.AliasTargets(b.ctx, b.alias)
	if len(targets) != 1 || targets[0] != res.NewIndex {
		t.Fatalf("alias points to %v", targets)
	}
	b.checkTruth(b.alias)
	if st, _ := mapping.Check(b.ctx, b.eng, def); st.Drift {
		t.Fatalf("still drift after reindex: %s", st.Message())
	}
	// The old index is kept until its time passes, then cleanup deletes it.
	if info, _ := b.eng.GetIndex(b.ctx, old); info == nil {
		t.Fatal("old index deleted before its time")
	}
	if done, err := Cleanup(b.ctx, b.db.Pool, b.eng, time.Now(), r.log); err != nil || len(done) != 0 {
		t.Fatalf("cleanup before expiry: %v %v", done, err)
	}
	done, err := Cleanup(b.ctx, b.db.Pool, b.eng, time.Now().Add(25*time.Hour), r.log)
	if err != nil || len(done) != 1 || done[0].Index != old {
		t.Fatalf("cleanup after expiry: %v %v", done, err)
	}
	if info, _ := b.eng.GetIndex(b.ctx, old); info != nil {
		t.Fatal("old index still there after cleanup")
	}
	// Nothing to do now.
	r2, _ := New(b.config(def))
	if _, err := r2.Run(b.ctx); !errors.Is(err, ErrUpToDate) {
		t.Fatalf("second run: %v", err)
	}
}

// Two reindexes of one alias cannot run at once; a job whose owner's
// heartbeat is stale is taken over with its params and progress.
func TestJobExclusiveAndResume(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	p := Params{Alias: "customers", Source: "customers_v1", Target: "customers_v2", Hash: "h"}
	j1, err := Acquire(ctx, db.Pool, "customers", "a", p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(ctx, db.Pool, "customers", "b", Params{}, time.Hour)
	var re *RunningError
	if !errors.As(err, &re) || re.Owner != "a" || !strings.Contains(err.Error(), "reindex abort customers") {
		t.Fatalf("second acquire: %v", err)
	}
	// Another alias is independent.
	if _, err := Acquire(ctx, db.Pool, "orders", "b", Params{}, time.Hour); err != nil {
		t.Fatal(err)
	}
	j1.Progress.LastID = 42
	if err := j1.heartbeat(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_job SET heartbeat_at = now() - interval '1 minute' WHERE id = $1`, j1.ID); err != nil {
		t.Fatal(err)
	}
	j2, err := Acquire(ctx, db.Pool, "customers", "b", Params{}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !j2.Resumed || j2.ID != j1.ID || j2.Params.Target != "customers_v2" || j2.Progress.LastID != 42 {
		t.Fatalf("resumed job: %+v", j2)
	}
	// The old owner is fenced off.
	if err := j1.heartbeat(ctx, db.Pool); !errors.Is(err, ErrLost) {
		t.Fatalf("old owner's heartbeat: %v", err)
	}
	// Dual-write targets appear once dual_write is set, and vanish when the
	// job ends.
	tg := NewTargets(db.Pool)
	if got, err := tg.For(ctx, "customers"); err != nil || len(got) != 0 {
		t.Fatalf("targets before dual writes: %v %v", got, err)
	}
	j2.Params.DualWrite = true
	if err := j2.saveParams(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	tg.at = time.Time{} // expire the cache
	if got, err := tg.For(ctx, "customers"); err != nil || len(got) != 1 || got[0] != "customers_v2" {
		t.Fatalf("targets: %v %v", got, err)
	}
	if err := j2.finish(ctx, db.Pool, "succeeded", &Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := tg.For(ctx, "customers"); len(got) != 1 {
		t.Fatalf("cached answer changed within the TTL: %v", got)
	}
	tg.at = time.Time{}
	if got, _ := tg.For(ctx, "customers"); len(got) != 0 {
		t.Fatalf("targets after the end: %v", got)
	}
	if _, err := Acquire(ctx, db.Pool, "customers", "c", Params{}, time.Hour); err != nil {
		t.Fatalf("a new job after the end: %v", err)
	}
}

// The target of an aborted reindex that a late live write re-created is
// deleted by cleanup; an index an alias points to never is.
func TestCleanupOrphanTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	live := b.buildLive(b.def(nil))
	orphan := mapping.PhysicalName(b.alias, 2)
	if err := b.eng.CreateIndex(b.ctx, orphan, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Params{{Alias: b.alias, Target: orphan}, {Alias: b.alias, Target: live}} {
		j, err := Acquire(b.ctx, b.db.Pool, b.alias, "x", p, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := markAborted(b.ctx, b.db.Pool, j.ID, "test"); err != nil {
			t.Fatal(err)
		}
	}
	done, err := Cleanup(b.ctx, b.db.Pool, b.eng, time.Now(), testLogger(t))
	if err != nil || len(done) != 1 || done[0].Index != orphan {
		t.Fatalf("cleanup: %+v %v", done, err)
	}
	if info, _ := b.eng.GetIndex(b.ctx, orphan); info != nil {
		t.Fatal("orphan still there")
	}
	if info, _ := b.eng.GetIndex(b.ctx, live); info == nil {
		t.Fatal("the live index was deleted")
	}
}

// A new index that differs from the live one fails the check with a report
// that names the differences; the alias stays, the new index goes.
func TestCheckFailureLeavesAliasAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(400)
	b.dispatchAll()
	old := b.buildLive(b.def(nil))
	live := b.gen.Live()
	victim, changed, moved := live[0].ID.String(), live[1].ID.String(), live[2].ID.String()
	cfg := b.config(b.def(emailAsText))
	cfg.beforeVerify = func(target string) {
		// moved gets the same version on both sides, but another tenant in
		// the new index: only its group differs.
		got, err := b.eng.MGet(b.ctx, old, []string{moved})
		if err != nil || got[moved].Source == nil {
			t.Errorf("read %s: %v", moved, err)
			return
		}
		doc, _ := projections.Decode(got[moved].Source)
		elsewhere := maps.Clone(doc)
		elsewhere[cfg.Def.Tenancy.Field] = "elsewhere"
		same, _ := json.Marshal(doc)
		other, _ := json.Marshal(elsewhere)
		res, err := b.eng.Bulk(b.ctx, []indexer.BulkOp{
			{Type: indexer.OpDelete, Index: target, ID: victim, Version: 1 << 40},
			{Type: indexer.OpIndex, Index: target, ID: changed, Version: 1 << 40, Doc: json.RawMessage(`{"code":"tampered"}`)},
			{Type: indexer.OpIndex, Index: old, ID: moved, Version: 1 << 40, Doc: same},
			{Type: indexer.OpIndex, Index: target, ID: moved, Version: 1 << 40, Doc: other},
		})
		if err != nil || slices.ContainsFunc(res, func(r indexer.BulkResult) bool { return r.Status >= 300 }) {
			t.Errorf("tamper: %+v %v", res, err)
		}
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(b.ctx)
	var ce *CheckError
	if !errors.As(err, &ce) || ce.Report.OK {
		t.Fatalf("run: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"FAILED", "missing in new: " + victim, "version differs: " + changed,
		"count differs for entity_type/tenant_key=customer/elsewhere: old 0, new 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("report lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, moved+" (old") {
		t.Errorf("report names %s's version, which is the same on both sides:\n%s", moved, msg)
	}
	t.Log(msg)
	if tg, _ := b.eng.AliasTargets(b.ctx, b.alias); len(tg) != 1 || tg[0] != old {
		t.Fatalf("alias moved: %v", tg)
	}
	if info, _ := b.eng.GetIndex(b.ctx, mapping.PhysicalName(b.alias, 2)); info != nil {
		t.Fatal("the new index of a failed reindex is still there")
	}
	st, _, res := b.jobState(b.alias)
	if st != "failed" || res == nil || res.Verify == nil || res.Verify.OK {
		t.Fatalf("job %s, result %+v", st, res)
	}
}

// The seed leaves out the tombstones whose events were all compacted, but
// only while they are tombstones: one revived between the look-up and the
// copy is copied; a tombstone with a retained event is copied.
func TestSeedLeavesOutCompactedTombstones(t *testing.T) {
	t.Parallel()
	b := setup(t)
	def := b.def(nil)
	src, dst := mapping.PhysicalName(b.alias, 1), mapping.PhysicalName(b.alias, 2)
	for _, ix := range []string{src, dst} {
		if err := mapping.CreatePhysical(b.ctx, b.eng, def, ix, false); err != nil {
			t.Fatal(err)
		}
	}
	ev := b.gen.Create() // a retained event of the aggregate of "kept"
	if err := pgx.BeginFunc(b.ctx, b.db.Pool, func(tx pgx.Tx) error { _, err := b.writer.Write(b.ctx, tx, ev); return err }); err != nil {
		t.Fatal(err)
	}
	live, gone, kept, revived := uuid.NewString(), uuid.NewString(), ev.AggregateID.String(), uuid.NewString()
	doc := func(deleted bool) json.RawMessage {
		return json.RawMessage(`{"code":"c","tenant_key":"t","deleted":` + strconv.FormatBool(deleted) + `}`)
	}
	write := func(id string, version int64, deleted bool) {
		t.Helper()
		res, err := b.eng.Bulk(b.ctx, []indexer.BulkOp{{Type: indexer.OpIndex, Index: src, ID: id, Version: version, Doc: doc(deleted)}})
		if err != nil || res[0].Status >= 300 {
			t.Fatalf("write %s: %v %+v", id, err, res)
		}
	}
	write(live, 3, false)
	write(gone, 5, true)
	write(kept, 7, true)
	write(revived, 8, true)
	if err := b.eng.Refresh(b.ctx, src); err != nil {
		t.Fatal(err)
	}
	r, err := New(b.config(def))
	if err != nil {
		t.Fatal(err)
	}
	r.target = dst
	skip, err := r.compactedTombstones(b.ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(skip)
	want := []string{gone, revived}
	slices.Sort(want)
	if !slices.Equal(skip, want) {
		t.Fatalf("tombstones without events: %v, want %v", skip, want)
	}
	write(revived, 9, false) // a live write in between
	if err := b.eng.Refresh(b.ctx, src); err != nil {
		t.Fatal(err)
	}
	if _, err := r.copyServerSide(b.ctx, indexer.Copy{Source: src, Dest: dst, Query: r.tombstoneQuery(skip), Batch: 100, Slices: 2}, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, err := b.eng.MGet(b.ctx, dst, []string{live, gone, kept, revived})
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range map[string]int64{live: 3, kept: 7, revived: 9} {
		if got[id].Version != v {
			t.Errorf("%s: version %d in the target, want %d", id, got[id].Version, v)
		}
	}
	if _, ok := got[gone]; ok {
		t.Errorf("the tombstone without events %s was copied", gone)
	}
}

// The seed's look-ups and the replay's read-ahead run during the
// dual-write wait, so the read-ahead's watermark is older than the wait's
// end. An event committed after it, which a consumer that did not write the
// target yet applied to the live index only and too late for the copy to
// see, must still reach the new index: through another replay pass.
func TestEventAfterTheEarlyWatermarkIsReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(300)
	b.dispatchAll()
	old := b.buildLive(b.def(nil))
	adm := b.eng.(indexer.Admin)
	// No periodic refresh of the live index: the copy sees only what the
	// reindex refreshed before it.
	if err := adm.PutSettings(b.ctx, old, map[string]any{"refresh_interval": "-1"}); err != nil {
		t.Fatal(err)
	}
	cfg := b.config(b.def(emailAsText))
	cfg.ChunkSize = 5000 // the first pass alone would hold every event
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hooked := false
	r.hooks.beforeCopy = func() {
		hooked = true
		ev := b.gen.Update()
		if err := pgx.BeginFunc(b.ctx, b.db.Pool, func(tx pgx.Tx) error { _, err := b.writer.Write(b.ctx, tx, ev); return err }); err != nil {
			t.Error(err)
			return
		}
		b.dispatchAll()
		// The late consumer: the live index only, not refreshed.
		live, err := New(b.config(b.def(nil)))
		if err != nil {
			t.Error(err)
			return
		}
		live.target = old
		if err := live.replay(b.ctx); err != nil {
			t.Error(err)
		}
	}
	res, err := r.Run(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hooked || !res.Verify.OK {
		t.Fatalf("hook ran: %v; result %+v", hooked, res)
	}
	b.checkTruth(b.alias) // the late event's version included
}

// The target fills without replicas and refreshes; the definition's
// settings are back before the check, and the hash in _meta is the
// definition's.
func TestReindexRestoresSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	withReplica := func(change func(map[string]any)) *mapping.Def {
		d := b.def(change)
		d.Settings["number_of_replicas"] = 1 // yellow on this single node
		return d
	}
	b.write(300)
	b.dispatchAll()
	b.buildLive(withReplica(nil))
	def := withReplica(emailAsText)
	cfg := b.config(def)
	var during json.RawMessage
	cfg.beforeVerify = func(target string) {
		if info, err := b.eng.GetIndex(b.ctx, target); err == nil && info != nil {
			during = info.Settings
		}
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.eng.GetIndex(b.ctx, res.NewIndex)
	if err != nil || info == nil {
		t.Fatalf("new index: %v", err)
	}
	for name, s := range map[string]json.RawMessage{"before the check": during, "after the swap": info.Settings} {
		if diff := settingChanges(s, def); len(diff) > 0 || replicasOf(s) != 1 {
			t.Errorf("settings %s differ from the definition in %v: %s", name, diff, s)
		}
	}
	if h := mapping.LiveHash(info.Mappings); h != def.Hash() {
		t.Errorf("hash in _meta %s, the definition's %s", h, def.Hash())
	}
	b.checkTruth(b.alias)
}

// Replicas are left to the engine when the definition auto-expands them.
func TestOwnsReplicas(t *testing.T) {
	for _, c := range []struct {
		settings map[string]any
		want     bool
	}{
		{map[string]any{"number_of_replicas": 1}, true},
		{map[string]any{"auto_expand_replicas": "0-1"}, false},
		{map[string]any{"index.auto_expand_replicas": "0-all"}, false},
		{map[string]any{"index": map[string]any{"auto_expand_replicas": "1-3"}}, false},
		{map[string]any{"auto_expand_replicas": false}, true},
	} {
		if got := ownsReplicas(&mapping.Def{Settings: c.settings}); got != c.want {
			t.Errorf("ownsReplicas(%v) = %v, want %v", c.settings, got, c.want)
		}
	}
}
