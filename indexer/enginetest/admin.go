package enginetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
)

// runAdmin is the part of the suite for indexer.Admin: scroll, group
// counts, settings, health and the server-side copy as a task.
func (s *suite) runAdmin(t *testing.T) {
	t.Run("AdminScroll", s.testAdminScroll)
	t.Run("AdminGroupCounts", s.testAdminGroupCounts)
	t.Run("AdminSettingsAndHealth", s.testAdminSettingsAndHealth)
	t.Run("AdminCopy", s.testAdminCopy)
	t.Run("AdminRefreshes", s.testAdminRefreshes)
}

// admin is the adapter's Admin side; every adapter must have one.
func (s *suite) admin(t *testing.T, eng indexer.Engine) indexer.Admin {
	t.Helper()
	a, ok := eng.(indexer.Admin)
	if !ok {
		t.Fatalf("%T does not implement indexer.Admin", eng)
	}
	return a
}

// fill writes n documents 0..n-1 to idx (document i at version i+1, tenant
// a for even i, b for odd ones, none for every tenth) and refreshes it.
func (s *suite) fill(t *testing.T, eng indexer.Engine, idx string, n int) {
	t.Helper()
	ops := make([]indexer.BulkOp, n)
	for i := range ops {
		doc := fmt.Sprintf(`{"name":"n%d","age":%d,"tenant":"%s"}`, i, i, map[bool]string{true: "a", false: "b"}[i%2 == 0])
		if i%10 == 9 {
			doc = fmt.Sprintf(`{"name":"n%d","age":%d}`, i, i)
		}
		ops[i] = index(idx, strconv.Itoa(i), int64(i+1), doc)
	}
	res, err := eng.Bulk(ctx(t), ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Status/100 != 2 {
			t.Fatalf("fill %s: op %d: %+v", idx, i, r)
		}
	}
	if err := eng.Refresh(ctx(t), idx); err != nil {
		t.Fatal(err)
	}
}

// testAdminScroll: every document once, in pages of the size asked, with
// its version (and source only when asked, only the fields asked); a query
// narrows it; an error of the callback ends the walk; a missing index is a
// 404 engine error.
func (s *suite) testAdminScroll(t *testing.T) {
	t.Parallel()
	eng := s.newEngine(t, s.url)
	adm := s.admin(t, eng)
	idx := s.newIndex(t, eng, "h")
	s.fill(t, eng, idx, 25)

	seen := map[string]int64{}
	pages := 0
	err := adm.Scroll(ctx(t), idx, nil, 10, indexer.WholeSource, func(total int64, hits []indexer.ScrollHit) error {
		pages++
		if total != 25 || len(hits) > 10 {
			t.Errorf("page %d: total %d, %d hits; want 25, at most 10", pages, total, len(hits))
		}
		for _, h := range hits {
			if _, dup := seen[h.ID]; dup {
				t.Errorf("document %s twice", h.ID)
			}
			seen[h.ID] = h.Version
			var d struct{ Name string }
			if err := json.Unmarshal(h.Source, &d); err != nil || d.Name != "n"+h.ID {
				t.Errorf("document %s: source %s", h.ID, h.Source)
			}
		}
		return nil
	})
	if err != nil || pages != 3 || len(seen) != 25 {
		t.Fatalf("scroll: %v, %d pages, %d documents; want 3 pages of 25", err, pages, len(seen))
	}
	for id, v := range seen {
		if n, _ := strconv.Atoi(id); v != int64(n+1) {
			t.Errorf("document %s: version %d, want %d", id, v, n+1)
		}
	}

	var ids []string
	q := json.RawMessage(`{"term":{"tenant":"a"}}`)
	err = adm.Scroll(ctx(t), idx, q, 100, nil, func(_ int64, hits []indexer.ScrollHit) error {
		for _, h := range hits {
			if len(h.Source) != 0 {
				t.Errorf("document %s: source %s without asking for it", h.ID, h.Source)
			}
			ids = append(ids, h.ID)
		}
		return nil
	})
	if err != nil || len(ids) != 13 {
		t.Errorf("scroll of tenant a: %v, %d documents; want 13", err, len(ids))
	}

	tenants := 0
	err = adm.Scroll(ctx(t), idx, q, 100, []string{"tenant"}, func(_ int64, hits []indexer.ScrollHit) error {
		for _, h := range hits {
			var d map[string]any
			if err := json.Unmarshal(h.Source, &d); err != nil || len(d) != 1 || d["tenant"] != "a" {
				t.Errorf("document %s: source %s; want only its tenant", h.ID, h.Source)
			}
			tenants++
		}
		return nil
	})
	if err != nil || tenants != 13 {
		t.Errorf("scroll of tenant a's tenant field: %v, %d documents; want 13", err, tenants)
	}

	stop := errors.New("stop")
	calls := 0
	err = adm.Scroll(ctx(t), idx, nil, 5, nil, func(int64, []indexer.ScrollHit) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("scroll ended by the callback: %v after %d calls; want its error after 1", err, calls)
	}

	err = adm.Scroll(ctx(t), testenv.Name("ct_missing"), nil, 5, nil, func(int64, []indexer.ScrollHit) error { return nil })
	if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != 404 {
		t.Errorf("scroll of a missing index: %v; want a 404 engine error", err)
	}
}

// testAdminGroupCounts: counts per value with missing values under "",
// per combination of two fields, the total, a query, and no fields at all.
func (s *suite) testAdminGroupCounts(t *testing.T) {
	t.Parallel()
	eng := s.newEngine(t, s.url)
	adm := s.admin(t, eng)
	idx := s.newIndex(t, eng, "h")
	s.fill(t, eng, idx, 30)

	got, total, err := adm.GroupCounts(ctx(t), idx, nil, []string{"tenant"})
	if want := map[string]int64{"a": 15, "b": 12, "": 3}; err != nil || total != 30 || !maps.Equal(got, want) {
		t.Errorf("counts by tenant: %v total %d, %v; want %v total 30", got, total, err, want)
	}
	got, _, err = adm.GroupCounts(ctx(t), idx, nil, []string{"tenant", "age"})
	if err != nil || len(got) != 30 || got["a/0"] != 1 || got["/9"] != 1 {
		t.Errorf("counts by tenant and age: %v, %v; want 30 groups such as a/0 and /9", got, err)
	}
	got, total, err = adm.GroupCounts(ctx(t), idx, json.RawMessage(`{"range":{"age":{"lt":10}}}`), []string{"tenant"})
	if want := map[string]int64{"a": 5, "b": 4, "": 1}; err != nil || total != 10 || !maps.Equal(got, want) {
		t.Errorf("counts by tenant of age < 10: %v total %d, %v; want %v", got, total, err, want)
	}
	got, total, err = adm.GroupCounts(ctx(t), idx, json.RawMessage(`{"term":{"tenant":"b"}}`), nil)
	if err != nil || total != 12 || !maps.Equal(got, map[string]int64{"": 12}) {
		t.Errorf("count of tenant b without fields: %v total %d, %v; want 12 under \"\"", got, total, err)
	}
}

// testAdminSettingsAndHealth: a dynamic setting changes, a static one is an
// engine error; an index without replicas is green at once, one with a
// replica on a single node is yellow and a wait for green times out without
// an error.
func (s *suite) testAdminSettingsAndHealth(t *testing.T) {
	t.Parallel()
	eng := s.newEngine(t, s.url)
	adm := s.admin(t, eng)
	idx := s.newIndex(t, eng, "h")

	if err := adm.PutSettings(ctx(t), idx, map[string]any{"refresh_interval": "-1"}); err != nil {
		t.Fatalf("put refresh_interval: %v", err)
	}
	info, err := eng.GetIndex(ctx(t), idx)
	if err != nil || info == nil {
		t.Fatal(info, err)
	}
	var st struct {
		Index struct {
			Refresh string `json:"refresh_interval"`
		} `json:"index"`
	}
	if err := json.Unmarshal(info.Settings, &st); err != nil || st.Index.Refresh != "-1" {
		t.Errorf("refresh_interval after PutSettings: %s, %v; want -1", info.Settings, err)
	}
	err = adm.PutSettings(ctx(t), idx, map[string]any{"number_of_shards": 3})
	if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != 400 {
		t.Errorf("put a static setting: %v; want a 400 engine error", err)
	}

	status, timedOut, err := adm.Health(ctx(t), idx, "green", 10*time.Second)
	if err != nil || status != "green" || timedOut {
		t.Errorf("health of %s (no replicas): %q timed out %v, %v; want green", idx, status, timedOut, err)
	}
	if err := adm.PutSettings(ctx(t), idx, map[string]any{"number_of_replicas": 1}); err != nil {
		t.Fatal(err)
	}
	status, timedOut, err = adm.Health(ctx(t), idx, "green", 300*time.Millisecond)
	if err != nil || !timedOut || status == "green" {
		t.Errorf("wait for green with a replica on one node: %q timed out %v, %v; want a time-out, not green", status, timedOut, err)
	}
	status, _, err = adm.Health(ctx(t), idx, "", 0)
	if err != nil || status != "yellow" {
		t.Errorf("health without waiting: %q, %v; want yellow", status, err)
	}
}

// testAdminCopy: the engine copies an index with the source's versions as
// external versions; a document the destination holds newer is a counted
// conflict; documents the destination's mapping refuses are failures of the
// task; the task of a finished copy stays readable; cancelling a task that
// does not exist is not an error.
func (s *suite) testAdminCopy(t *testing.T) {
	t.Parallel()
	eng := s.newEngine(t, s.url)
	adm := s.admin(t, eng)
	src, dst := s.newIndex(t, eng, "h"), s.newIndex(t, eng, "h")
	s.fill(t, eng, src, 20)
	if res, err := eng.Bulk(ctx(t), []indexer.BulkOp{index(dst, "3", 100, `{"name":"newer"}`)}); err != nil || res[0].Status/100 != 2 {
		t.Fatal(res, err)
	}

	wait := func(task string) *indexer.TaskInfo {
		t.Helper()
		var info *indexer.TaskInfo
		testenv.Eventually(t, time.Minute, func() bool {
			var err error
			info, err = adm.Task(ctx(t), task, time.Second)
			if err != nil {
				t.Fatalf("task %s: %v", task, err)
			}
			return info.Completed
		}, "the copy task %s completes", task)
		return info
	}
	task, err := adm.StartCopy(ctx(t), indexer.Copy{Source: src, Dest: dst, Query: json.RawMessage(`{"range":{"age":{"lt":15}}}`), Batch: 4, Slices: 2})
	if err != nil || task == "" {
		t.Fatalf("start copy: %q, %v", task, err)
	}
	info := wait(task)
	if info.Error != nil || len(info.Failures) != 0 || info.Total != 15 || info.Created != 14 || info.VersionConflicts != 1 {
		t.Errorf("copy task: %+v; want 15 documents, 14 created, 1 conflict, no failure", info)
	}
	if again, err := adm.Task(ctx(t), task, 0); err != nil || !again.Completed || again.Created != 14 {
		t.Errorf("finished task read again: %+v, %v", again, err)
	}
	if err := eng.Refresh(ctx(t), dst); err != nil {
		t.Fatal(err)
	}
	docs, err := eng.MGet(ctx(t), dst, []string{"0", "3", "14", "15"})
	if err != nil || docs["0"].Version != 1 || docs["14"].Version != 15 || docs["3"].Version != 100 {
		t.Errorf("copied documents: %v, %v; want the source's versions, the newer one kept", docs, err)
	}
	if _, ok := docs["15"]; ok {
		t.Error("document 15 copied although the query left it out")
	}

	// A destination whose mapping refuses every document: failures.
	strict := testenv.Name("ct")
	if err := eng.CreateIndex(ctx(t), strict, json.RawMessage(`{"settings":{"index":{"number_of_shards":1,"number_of_replicas":0}},"mappings":{"properties":{"name":{"type":"integer"}}}}`)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.DeleteIndex(ctx(t), strict) })
	task, err = adm.StartCopy(ctx(t), indexer.Copy{Source: src, Dest: strict})
	if err != nil {
		t.Fatal(err)
	}
	info = wait(task)
	if len(info.Failures) == 0 && info.Error == nil {
		t.Errorf("copy into a mapping that refuses the documents: %+v; want failures", info)
	}

	if err := adm.CancelTask(ctx(t), task); err != nil {
		t.Errorf("cancel a finished task: %v", err)
	}
	if err := adm.CancelTask(ctx(t), "aaaaaaaaaaaaaaaaaaaaaa:424242"); err != nil {
		t.Errorf("cancel a task that does not exist: %v", err)
	}
}

// testAdminRefreshes: Refreshes counts per shard copy the refreshes that
// make writes searchable, without refreshing; a refresh moves every
// copy's count; an alias answers for its index; a missing index is a 404.
func (s *suite) testAdminRefreshes(t *testing.T) {
	t.Parallel()
	eng := s.newEngine(t, s.url)
	adm := s.admin(t, eng)
	idx := s.newIndex(t, eng, "r")
	if err := adm.PutSettings(ctx(t), idx, map[string]any{"refresh_interval": "-1"}); err != nil {
		t.Fatal(err)
	}
	before, err := adm.Refreshes(ctx(t), idx)
	if err != nil || len(before) == 0 {
		t.Fatalf("refreshes of %s: %v, %v; want a count per started shard copy", idx, before, err)
	}
	for k := range before {
		if !strings.HasPrefix(k, idx+"/") {
			t.Errorf("key %q does not name the index %s", k, idx)
		}
	}
	if res, err := eng.Bulk(ctx(t), []indexer.BulkOp{index(idx, "1", 1, `{"name":"a"}`)}); err != nil || res[0].Status/100 != 2 {
		t.Fatalf("write: %+v, %v", res, err)
	}
	again, err := adm.Refreshes(ctx(t), idx)
	if err != nil || !maps.Equal(before, again) {
		t.Errorf("without a refresh (refresh_interval -1): %v then %v, %v; want the same counts", before, again, err)
	}
	// moreRefreshes reads ix's counts and requires each copy's to have
	// grown since was; it returns them.
	moreRefreshes := func(ix string, was map[string]int64, what string) map[string]int64 {
		t.Helper()
		now, err := adm.Refreshes(ctx(t), ix)
		if err != nil {
			t.Fatal(err)
		}
		for k, n := range was {
			if now[k] <= n {
				t.Errorf("copy %s: %d refreshes before %s, %d after; want more", k, n, what, now[k])
			}
		}
		return now
	}
	if err := eng.Refresh(ctx(t), idx); err != nil {
		t.Fatal(err)
	}
	after := moreRefreshes(idx, before, "a refresh")
	// Two indexes in one request: both refreshed.
	idx2 := s.newIndex(t, eng, "r2")
	if err := adm.PutSettings(ctx(t), idx2, map[string]any{"refresh_interval": "-1"}); err != nil {
		t.Fatal(err)
	}
	before2, err := adm.Refreshes(ctx(t), idx2)
	if err != nil {
		t.Fatal(err)
	}
	res, err := eng.Bulk(ctx(t), []indexer.BulkOp{index(idx, "2", 1, `{"name":"b"}`), index(idx2, "1", 1, `{"name":"a"}`)})
	if err != nil || res[0].Status/100 != 2 || res[1].Status/100 != 2 {
		t.Fatalf("write: %+v, %v", res, err)
	}
	if err := eng.Refresh(ctx(t), idx, idx2); err != nil {
		t.Fatal(err)
	}
	after = moreRefreshes(idx, after, "refreshing two indexes at once")
	moreRefreshes(idx2, before2, "refreshing two indexes at once")
	if err := eng.Refresh(ctx(t)); err == nil {
		t.Error("a refresh of no index: no error; want one (not a refresh of every index)")
	}
	alias := idx + "_alias"
	if err := eng.UpdateAliases(ctx(t), []indexer.AliasAction{{Add: true, Index: idx, Alias: alias}}); err != nil {
		t.Fatal(err)
	}
	viaAlias, err := adm.Refreshes(ctx(t), alias)
	if err != nil || !maps.Equal(viaAlias, after) {
		t.Errorf("through the alias: %v, %v; want %v", viaAlias, err, after)
	}
	_, err = adm.Refreshes(ctx(t), idx+"_missing")
	if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != 404 {
		t.Errorf("a missing index: %v; want a 404 engine error", err)
	}
}
