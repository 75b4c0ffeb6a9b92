package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/dashboard/dashboardtest"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/reindex"
)

// reindexAPI reads /api/reindex twice: typed, and as raw JSON objects (to
// check the documented field names).
func reindexAPI(t *testing.T, addr string) (dashboard.ReindexResponse, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/reindex")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/reindex: %d %v", resp.StatusCode, err)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("/api/reindex: Cache-Control %q", cc)
	}
	b, _ := json.Marshal(raw)
	var r dashboard.ReindexResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r, raw
}

// aliasRow is the row of alias in an /api/reindex answer.
func aliasRow(t *testing.T, r dashboard.ReindexResponse, alias string) dashboard.ReindexAlias {
	t.Helper()
	i := slices.IndexFunc(r.Aliases, func(a dashboard.ReindexAlias) bool { return a.Alias == alias })
	if i < 0 {
		t.Fatalf("/api/reindex has no row of %s: %+v", alias, r.Aliases)
	}
	return r.Aliases[i]
}

// panelRow is what the page's Reindex panel shows for one alias.
type panelRow struct {
	Drift   string  `json:"drift"`
	State   string  `json:"state"`
	Phase   string  `json:"phase"`
	Percent float64 `json:"percent"`
	Text    string  `json:"text"`
}

func readPanelRow(t *testing.T, bctx context.Context, alias string) *panelRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
	defer cancel()
	js := fmt.Sprintf(`(() => { const tr = document.querySelector('#reindex tr[data-alias=%q]'); if (!tr) return "null";
		const bar = tr.querySelector(".bar");
		return JSON.stringify({drift: tr.dataset.drift || "", state: tr.dataset.state || "", phase: tr.dataset.phase || "",
			percent: bar ? Number(bar.dataset.percent) : -1, text: tr.textContent}); })()`, alias)
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("read the Reindex panel: %v", err)
	}
	var row *panelRow
	if err := json.Unmarshal([]byte(raw), &row); err != nil {
		t.Fatalf("Reindex panel: %v (%s)", err, raw)
	}
	return row
}

// TestConsoleReindexPanel runs a relay with a search consumer over real
// services and a real reindex beside it, whose seed the test holds (the
// re-projection of each document waits for a token): the page in headless
// Chromium and /api/reindex show the definition changed on disk as drift,
// then the running job's phase and a progress that moves as documents are
// let through, then the finished job, the new live index and no drift.
func TestConsoleReindexPanel(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	alias := testenv.Name("reidx")
	defs, projFile := customerIndex(t, alias)
	addr := testenv.FreeAddr(t)
	cfgFile := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q, sample_interval: 200ms, drift_interval: 300ms}
relay: {poll_interval: 200ms}
engine: {urls: [%q]}
indexes: {definitions: %q, projections: [%q]}
consumers:
  - {name: search, type: search, search: {indexes: [%s]}}
routes:
  - {consumer: search, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema, addr, testenv.EngineURL(t), defs, projFile, alias))

	const docs = 300
	gen := loadgen.New(7)
	evs := make([]outbox.Event, docs)
	for i := range evs {
		evs[i] = gen.Create()
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema}).Write(ctx, tx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	startRelay(t, cfgFile, addr)
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := indexer.New(cfg.Engine, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(eng) })
	testenv.Eventually(t, 120*time.Second, func() bool {
		_ = eng.Refresh(ctx, alias)
		n, err := eng.Count(ctx, alias, nil)
		return err == nil && n == docs
	}, "the relay never indexed the %d documents", docs)

	// Matching: the live index, the same hash on both sides, no job.
	var row dashboard.ReindexAlias
	testenv.Eventually(t, 30*time.Second, func() bool {
		r, _ := reindexAPI(t, addr)
		row = aliasRow(t, r, alias)
		return row.Drift == dashboard.DriftNone
	}, "no drift check of %s: %+v", alias, row)
	if row.Index != alias+"_v1" || row.Hash == "" || row.Hash != row.LiveHash || row.Job != nil {
		t.Fatalf("before the change: %+v", row)
	}
	oldHash := row.Hash

	// The definition changes on disk: the drift shows for the alias.
	defFile := filepath.Join(defs, alias+".json")
	b, err := os.ReadFile(defFile)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(b), `"tags":         { "type": "keyword" },`, `"tags":         { "type": "keyword" }, "segment": { "type": "keyword" },`, 1)
	if changed == string(b) {
		t.Fatal("the customers definition changed shape: no tags field to add a field after")
	}
	if err := os.WriteFile(defFile, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		r, _ := reindexAPI(t, addr)
		row = aliasRow(t, r, alias)
		return row.Drift == dashboard.DriftDiffers
	}, "the changed definition never showed as drift: %+v", row)
	if row.Hash == oldHash || row.LiveHash != oldHash || !strings.Contains(row.Message, "reindex required") {
		t.Errorf("drift: %+v; want the new hash against the live %s and the watcher's message", row, oldHash)
	}
	bctx := dashboardtest.OpenBrowser(t, "http://"+addr+"/")
	var pr *panelRow
	testenv.Eventually(t, 30*time.Second, func() bool {
		pr = readPanelRow(t, bctx, alias)
		return pr != nil && pr.Drift == "differs" && strings.Contains(pr.Text, alias+"_v1") && strings.Contains(pr.Text, "differs")
	}, "the panel never showed the drift: %+v", pr)

	// A reindex whose seed the test holds: each document waits for a token.
	defsNow, err := loadDefs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	set, err := loadProjections(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens, open := make(chan struct{}, docs), make(chan struct{})
	release := func(n int) {
		for range n {
			tokens <- struct{}{}
		}
	}
	var seen atomic.Int64
	rx, err := reindex.New(reindex.Config{Pool: db.Pool, Engine: eng, Def: defsNow[alias], Projections: set, Wants: searchRoutes(cfg, alias),
		KeepOld: -1, Heartbeat: 200 * time.Millisecond, BulkSize: 10, Concurrency: 1,
		Reproject: func(doc map[string]any) (map[string]any, error) {
			select {
			case <-tokens:
			case <-open:
			}
			seen.Add(1)
			return doc, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancelRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() {
		_, err := rx.Run(rctx)
		runErr <- err
	}()
	t.Cleanup(func() {
		cancelRun()
		select {
		case <-open:
		default:
			close(open)
		}
		<-runErr
	})

	job := func() *dashboard.ReindexJob {
		r, _ := reindexAPI(t, addr)
		return aliasRow(t, r, alias).Job
	}
	// 40 documents: two scroll pages of 20, four bulks of 10.
	release(40)
	var j *dashboard.ReindexJob
	testenv.Eventually(t, 120*time.Second, func() bool {
		j = job()
		return j != nil && j.State == "running" && j.Phase == reindex.PhaseSeed && j.DocsSeeded >= 40 && j.DocsTotal == docs
	}, "the running seed never showed 40 of %d documents: %+v", docs, j)
	if j.Source != alias+"_v1" || j.Target != alias+"_v2" || j.Owner == "" || j.Percent == nil || j.StartedAt.IsZero() {
		t.Errorf("running job: %+v", j)
	}
	_, raw := reindexAPI(t, addr)
	checkReindexFields(t, raw, alias)
	testenv.Eventually(t, 30*time.Second, func() bool {
		pr = readPanelRow(t, bctx, alias)
		return pr != nil && pr.State == "running" && pr.Phase == "seed" && pr.Percent > 0 &&
			strings.Contains(pr.Text, "phase seed") && strings.Contains(pr.Text, fmt.Sprintf("/%d", docs))
	}, "the panel never showed the running seed: %+v", pr)
	first := pr.Percent

	// 60 more: the progress moves, on the page too.
	release(60)
	testenv.Eventually(t, 60*time.Second, func() bool {
		pr = readPanelRow(t, bctx, alias)
		return pr != nil && pr.Phase == "seed" && pr.Percent > first
	}, "the panel's progress never moved past %.1f%%: %+v", first, pr)
	if out := os.Getenv("SEARCHSYNC_REINDEX_SCREENSHOT"); out != "" {
		// The panel while the seed is held (docs/console-reindex.png).
		png, err := chromedp.Run(bctx, chromedp.Screenshot(chromedp.CSS("#reindexsec")))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Let the seed go: the job ends, the alias moves, the drift is gone.
	close(open)
	select {
	case err := <-runErr:
		runErr <- err // for the cleanup
		if err != nil {
			t.Fatalf("reindex: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the reindex did not end within 3m once the seed was let go")
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		r, _ := reindexAPI(t, addr)
		row = aliasRow(t, r, alias)
		return row.Job != nil && row.Job.State == "succeeded" && row.Drift == dashboard.DriftNone && row.Index == alias+"_v2"
	}, "the finished reindex never showed: %+v (%+v)", row, row.Job)
	if j := row.Job; j.Phase != reindex.PhaseDone || j.DocsSeeded != docs || j.FinishedAt == nil || j.NewIndex != alias+"_v2" || j.Seconds <= 0 {
		t.Errorf("finished job: %+v", j)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		pr = readPanelRow(t, bctx, alias)
		return pr != nil && pr.State == "succeeded" && pr.Drift == "none" && strings.Contains(pr.Text, "succeeded") &&
			strings.Contains(pr.Text, alias+"_v2") && strings.Contains(pr.Text, "docs "+strconv.Itoa(docs))
	}, "the panel never showed the finished job: %+v", pr)
	if n := seen.Load(); n != docs {
		t.Errorf("%d documents re-projected, want %d", n, docs)
	}
}

// checkReindexFields checks the field names docs/console.md documents for
// /api/reindex, on the raw JSON of a running job.
func checkReindexFields(t *testing.T, raw map[string]any, alias string) {
	t.Helper()
	if _, ok := raw["since"].(string); !ok {
		t.Errorf("/api/reindex: no since: %v", raw)
	}
	list, _ := raw["aliases"].([]any)
	var row map[string]any
	for _, x := range list {
		if m, _ := x.(map[string]any); m["alias"] == alias {
			row = m
		}
	}
	if row == nil {
		t.Fatalf("/api/reindex: no row of %s: %v", alias, raw)
	}
	for _, k := range []string{"alias", "index", "hash", "live_hash", "drift", "message", "checked_at", "job"} {
		if _, ok := row[k]; !ok {
			t.Errorf("/api/reindex: alias row lacks %q: %v", k, row)
		}
	}
	job, _ := row["job"].(map[string]any)
	for _, k := range []string{"id", "alias", "state", "phase", "source", "target", "docs_seeded", "docs_total", "last_id", "watermark",
		"outbox_head", "events_replayed", "docs_written", "percent", "rate_per_s", "started_at", "updated_at", "heartbeat_age_seconds", "owner"} {
		if _, ok := job[k]; !ok {
			t.Errorf("/api/reindex: job lacks %q: %v", k, job)
		}
	}
	if h, _ := job["outbox_head"].(float64); h < 300 {
		t.Errorf("/api/reindex: outbox_head %v, want the outbox's highest id (≥ 300)", job["outbox_head"])
	}
}

// checkSearchable checks commit → searchable on a relay whose search
// consumer writes alias under load: the history's samples carry its
// percentiles, /metrics its histogram, the page a p50 and a p99 line; and
// an event is never searchable before it was delivered (p50 of searchable
// not below p50 of delivered, with the buckets' interpolation as slack).
func checkSearchable(t *testing.T, bctx context.Context, addr, alias string) {
	t.Helper()
	var got *dashboard.ConsumerSample
	testenv.Eventually(t, 60*time.Second, func() bool {
		for _, s := range historySamples(t, addr) {
			if c, ok := s.Consumers["search"]; ok && c.Searchable[alias].Delivered > 0 && c.Latency != nil {
				got = &c
			}
		}
		return got != nil
	}, "no sample has commit → searchable of %s", alias)
	q := got.Searchable[alias]
	t.Logf("commit → searchable of %s: %+v; commit → delivered: %+v", alias, q, *got.Latency)
	if q.P50 <= 0 || q.P99 < q.P50 || q.P50 < 0.8*got.Latency.P50 {
		t.Errorf("commit → searchable of %s: %+v; commit → delivered %+v", alias, q, *got.Latency)
	}
	// The sample above may be one a relay that stopped wrote into the
	// history; the relay at addr exports its own figure once it has seen
	// one of its writes become searchable.
	metric := `searchsync_searchable_latency_seconds_count{consumer="search",index="` + alias + `"}`
	testenv.Eventually(t, 60*time.Second, func() bool {
		n, _ := metricSample(t, addr, metric)
		return n > 0
	}, "%s at %s is not above zero", metric, addr)
	want := []string{alias + " p50", alias + " p99"}
	var c *dashboardtest.ChartState
	points := func() bool {
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(() => { const u = window.consoleCharts.searchablechart;
			return u ? u.data[1].filter((v) => v !== null && v > 0).length : 0; })()`))
		return err == nil && n > 0
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		c = dashboardtest.Chart(t, bctx, "searchablechart")
		return c != nil && slices.Equal(c.Labels, want) && points()
	}, "the commit → searchable chart never drew a point of %v: %+v", want, c)
}
