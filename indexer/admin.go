package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Admin is the part of the engine seam that maintenance jobs use beside
// Engine — `searchsync reindex` walks whole indexes, counts per group,
// changes dynamic settings, waits for health and lets the engine copy an
// index itself; the relay's commit → searchable measurement reads the
// refresh counts. Both adapters implement it (OpenSearch and Elasticsearch
// spell these calls the same way; the clients carry them) and the contract
// suite in enginetest covers every method. Errors are classified as for
// Engine: *EngineError for an answer with status >= 400, *TransportError
// for no answer.
type Admin interface {
	// Scroll walks every document of index matching query (nil: all),
	// size per page, in index order, calling fn with the total and each
	// page. The hits carry ids, versions and routing, and the source fields
	// named in source (nil: no source; WholeSource: all of it). The scroll
	// is cleared when Scroll returns; an error of fn ends the walk and is
	// returned.
	Scroll(ctx context.Context, index string, query json.RawMessage, size int, source []string, fn func(total int64, hits []ScrollHit) error) error
	// GroupCounts counts the documents of index matching query (nil: all)
	// per combination of the values of fields (a composite aggregation,
	// paged), keyed by the values joined with "/" (a missing value is "");
	// with no fields, all of them under "". It returns the total too.
	GroupCounts(ctx context.Context, index string, query json.RawMessage, fields []string) (map[string]int64, int64, error)
	// PutSettings changes dynamic settings of index (names without the
	// "index." prefix, e.g. refresh_interval).
	PutSettings(ctx context.Context, index string, settings map[string]any) error
	// Health returns the health of index: green, yellow or red. With
	// waitFor set it first waits up to timeout for that status; timedOut
	// says that it did not come (not an error).
	Health(ctx context.Context, index, waitFor string, timeout time.Duration) (status string, timedOut bool, err error)
	// StartCopy starts the engine's _reindex of c.Source into c.Dest as a
	// task (wait_for_completion=false) and returns the task id.
	StartCopy(ctx context.Context, c Copy) (task string, err error)
	// Task waits up to wait (0: not at all) for the task to complete and
	// returns where it stands; a wait that ends first is not an error.
	Task(ctx context.Context, task string, wait time.Duration) (*TaskInfo, error)
	// CancelTask cancels a task; a task that no longer exists is not an
	// error.
	CancelTask(ctx context.Context, task string) error
	// Refreshes returns, for every started shard copy of index (an alias:
	// of the indexes behind it), how many refreshes have made writes
	// visible to search (the external refreshes; the total where the
	// engine does not count those), keyed by index/shard/node. One request
	// (the refresh stats at shard level); it refreshes nothing.
	Refreshes(ctx context.Context, index string) (map[string]int64, error)
}

// WholeSource asks Scroll for every field of the source.
var WholeSource = []string{"*"}

// ScrollHit is one document of a scroll.
type ScrollHit struct {
	ID      string          `json:"_id"`
	Version int64           `json:"_version"`
	Routing string          `json:"_routing"`
	Source  json.RawMessage `json:"_source"` // nil without source
}

// Copy is a server-side copy (_reindex). Every document keeps its version
// as external version in Dest; version conflicts (Dest holds that version
// or a newer one) are counted, not failures (conflicts: proceed).
type Copy struct {
	Source, Dest string
	Query        json.RawMessage // documents of Source to copy; nil: all
	Batch        int             // documents per scroll batch; 0: the engine's default
	Slices       int             // parallel slices; < 1: 1
}

// TaskInfo is where an engine task stands. Failures are the documents the
// copy could not write (each the engine's JSON), Error what ended the task.
type TaskInfo struct {
	Completed        bool
	Total            int64
	Created          int64
	Updated          int64
	VersionConflicts int64
	Failures         []json.RawMessage
	Error            *EngineError
}

var (
	_ Admin = (*OpenSearch)(nil)
	_ Admin = (*Elasticsearch)(nil)
)

// adminAPI names the endpoints of Admin.
type adminAPI int

const (
	apiScrollStart  adminAPI = iota // POST /<index>/_search?scroll=
	apiScrollNext                   // POST /_search/scroll
	apiScrollClear                  // DELETE /_search/scroll
	apiAggregate                    // POST /<index>/_search (size 0)
	apiPutSettings                  // PUT /<index>/_settings
	apiHealth                       // GET /_cluster/health/<index>
	apiCopy                         // POST /_reindex?wait_for_completion=false
	apiTaskGet                      // GET /_tasks/<id>
	apiTaskCancel                   // POST /_tasks/<id>/_cancel
	apiRefreshStats                 // GET /<index>/_stats/refresh?level=shards
	apiPutMapping                   // PUT /<index>/_mapping
)

// adminRequest is one Admin call.
type adminRequest struct {
	api     adminAPI
	index   string
	id      string // task id; scroll id (also in body)
	body    []byte
	keep    time.Duration // scroll keep-alive
	status  string        // health: wait_for_status
	timeout time.Duration // health, task: how long to wait
	slices  int
}

// adminSender carries one Admin request with a concrete client (see
// sender: err only when there is no answer).
type adminSender interface {
	sendAdmin(ctx context.Context, r adminRequest) (status int, body []byte, err error)
}

// scrollKeep is how long the engine keeps a scroll between two pages.
const scrollKeep = 5 * time.Minute

// doAdmin is engine.do for Admin requests: the same classification, hints
// included.
func (e *engine) doAdmin(ctx context.Context, op string, r adminRequest, okStatus ...int) (int, []byte, error) {
	s, ok := e.s.(adminSender)
	if !ok {
		return 0, nil, fmt.Errorf("%s %s: the adapter does not carry admin requests", e.kind, op)
	}
	if e.serverless {
		if lacks := serverlessLacksAdmin(r.api); lacks != "" {
			return 0, nil, &UnsupportedError{Op: e.kind + " " + op, API: lacks}
		}
	}
	status, body, err := s.sendAdmin(ctx, r)
	return e.answer(op, status, body, err, okStatus)
}

func decodeInto(kind, op string, body []byte, out any) error {
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", kind, op, err)
	}
	return nil
}

type scrollPage struct {
	ScrollID string `json:"_scroll_id"`
	Hits     struct {
		Total struct {
			Value int64 `json:"value"`
		} `json:"total"`
		Hits []ScrollHit `json:"hits"`
	} `json:"hits"`
}

func (e *engine) Scroll(ctx context.Context, index string, query json.RawMessage, size int, source []string, fn func(total int64, hits []ScrollHit) error) error {
	body := map[string]any{"size": size, "version": true, "sort": []string{"_doc"}, "_source": false}
	if source != nil {
		body["_source"] = source
	}
	if query != nil {
		body["query"] = query
	}
	b, _ := json.Marshal(body)
	op := "scroll " + index
	_, ans, err := e.doAdmin(ctx, op, adminRequest{api: apiScrollStart, index: index, body: b, keep: scrollKeep})
	if err != nil {
		return err
	}
	var page scrollPage
	if err := decodeInto(e.kind, op, ans, &page); err != nil {
		return err
	}
	var id string
	defer func() {
		if id != "" {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			b, _ := json.Marshal(map[string]any{"scroll_id": []string{id}})
			_, _, _ = e.doAdmin(c, "clear scroll of "+index, adminRequest{api: apiScrollClear, body: b}, http.StatusNotFound)
		}
	}()
	for {
		if page.ScrollID != "" {
			id = page.ScrollID
		}
		if len(page.Hits.Hits) == 0 {
			return nil
		}
		if err := fn(page.Hits.Total.Value, page.Hits.Hits); err != nil {
			return err
		}
		b, _ := json.Marshal(map[string]any{"scroll": strconv.FormatInt(scrollKeep.Milliseconds(), 10) + "ms", "scroll_id": id})
		_, ans, err := e.doAdmin(ctx, op, adminRequest{api: apiScrollNext, id: id, body: b, keep: scrollKeep})
		if err != nil {
			return err
		}
		page = scrollPage{}
		if err := decodeInto(e.kind, op, ans, &page); err != nil {
			return err
		}
	}
}

func (e *engine) GroupCounts(ctx context.Context, index string, query json.RawMessage, fields []string) (map[string]int64, int64, error) {
	out := map[string]int64{}
	if len(fields) == 0 {
		var body []byte
		if query != nil {
			body, _ = json.Marshal(map[string]any{"query": query})
		}
		n, err := e.Count(ctx, index, body)
		if err != nil {
			return nil, 0, err
		}
		out[""] = n
		return out, n, nil
	}
	sources := make([]map[string]any, len(fields))
	for i, f := range fields {
		sources[i] = map[string]any{f: map[string]any{"terms": map[string]any{"field": f, "missing_bucket": true}}}
	}
	op := "count " + index + " by " + strings.Join(fields, ",")
	var after map[string]any
	for {
		comp := map[string]any{"size": 1000, "sources": sources}
		if after != nil {
			comp["after"] = after
		}
		body := map[string]any{"size": 0, "track_total_hits": true, "aggs": map[string]any{"g": map[string]any{"composite": comp}}}
		if query != nil {
			body["query"] = query
		}
		b, _ := json.Marshal(body)
		_, ans, err := e.doAdmin(ctx, op, adminRequest{api: apiAggregate, index: index, body: b})
		if err != nil {
			return nil, 0, err
		}
		var resp struct {
			Hits struct {
				Total struct {
					Value int64 `json:"value"`
				} `json:"total"`
			} `json:"hits"`
			Aggs struct {
				G struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []struct {
						Key      map[string]any `json:"key"`
						DocCount int64          `json:"doc_count"`
					} `json:"buckets"`
				} `json:"g"`
			} `json:"aggregations"`
		}
		if err := decodeInto(e.kind, op, ans, &resp); err != nil {
			return nil, 0, err
		}
		for _, bk := range resp.Aggs.G.Buckets {
			parts := make([]string, len(fields))
			for i, f := range fields {
				if v := bk.Key[f]; v != nil {
					parts[i] = fmt.Sprint(v)
				}
			}
			out[strings.Join(parts, "/")] += bk.DocCount
		}
		if len(resp.Aggs.G.Buckets) == 0 || resp.Aggs.G.AfterKey == nil {
			return out, resp.Hits.Total.Value, nil
		}
		after = resp.Aggs.G.AfterKey
	}
}

func (e *engine) PutSettings(ctx context.Context, index string, settings map[string]any) error {
	b, err := json.Marshal(map[string]any{"index": settings})
	if err != nil {
		return fmt.Errorf("%s update settings of %s: %w", e.kind, index, err)
	}
	_, _, err = e.doAdmin(ctx, "update settings of "+index, adminRequest{api: apiPutSettings, index: index, body: b})
	return err
}

func (e *engine) Health(ctx context.Context, index, waitFor string, timeout time.Duration) (string, bool, error) {
	op := "health of " + index
	r := adminRequest{api: apiHealth, index: index}
	if waitFor != "" {
		r.status, r.timeout = waitFor, max(timeout, time.Millisecond)
	}
	status, ans, err := e.doAdmin(ctx, op, r, http.StatusRequestTimeout)
	if err != nil {
		return "", false, err
	}
	var h struct {
		Status   string `json:"status"`
		TimedOut bool   `json:"timed_out"`
	}
	if err := decodeInto(e.kind, op, ans, &h); err != nil {
		return "", false, err
	}
	return h.Status, h.TimedOut || status == http.StatusRequestTimeout, nil
}

func (e *engine) StartCopy(ctx context.Context, c Copy) (string, error) {
	src := map[string]any{"index": c.Source}
	if c.Batch > 0 {
		src["size"] = c.Batch
	}
	if c.Query != nil {
		src["query"] = c.Query
	}
	b, _ := json.Marshal(map[string]any{"conflicts": "proceed", "source": src, "dest": map[string]any{"index": c.Dest, "version_type": "external"}})
	op := "copy " + c.Source + " to " + c.Dest
	_, ans, err := e.doAdmin(ctx, op, adminRequest{api: apiCopy, body: b, slices: max(c.Slices, 1)})
	if err != nil {
		return "", err
	}
	var t struct {
		Task string `json:"task"`
	}
	if err := decodeInto(e.kind, op, ans, &t); err != nil {
		return "", err
	}
	if t.Task == "" {
		return "", fmt.Errorf("%s %s: the answer names no task", e.kind, op)
	}
	return t.Task, nil
}

func (e *engine) Task(ctx context.Context, task string, wait time.Duration) (*TaskInfo, error) {
	op := "task " + task
	_, ans, err := e.doAdmin(ctx, op, adminRequest{api: apiTaskGet, id: task, timeout: wait})
	if ee, ok := AsEngineError(err); ok && wait > 0 && (ee.Status == http.StatusRequestTimeout || strings.Contains(ee.Type, "timeout")) {
		// The wait ended before the task: where it stands now.
		_, ans, err = e.doAdmin(ctx, op, adminRequest{api: apiTaskGet, id: task})
	}
	if err != nil {
		return nil, err
	}
	var t struct {
		Completed bool `json:"completed"`
		Task      struct {
			Status struct {
				Total            int64 `json:"total"`
				Created          int64 `json:"created"`
				Updated          int64 `json:"updated"`
				VersionConflicts int64 `json:"version_conflicts"`
			} `json:"status"`
		} `json:"task"`
		Error    *errorBody `json:"error"`
		Response *struct {
			Failures []json.RawMessage `json:"failures"`
		} `json:"response"`
	}
	if err := decodeInto(e.kind, op, ans, &t); err != nil {
		return nil, err
	}
	st := t.Task.Status
	info := &TaskInfo{Completed: t.Completed, Total: st.Total, Created: st.Created, Updated: st.Updated, VersionConflicts: st.VersionConflicts}
	if t.Error != nil {
		info.Error = &EngineError{Op: e.kind + " " + op, Type: t.Error.Type, Reason: t.Error.text()}
	}
	if t.Response != nil {
		info.Failures = t.Response.Failures
	}
	return info, nil
}

func (e *engine) CancelTask(ctx context.Context, task string) error {
	_, _, err := e.doAdmin(ctx, "cancel task "+task, adminRequest{api: apiTaskCancel, id: task}, http.StatusNotFound)
	return err
}

// refreshStatsFilter keeps what Refreshes reads of the shard-level stats.
var refreshStatsFilter = []string{"indices.*.shards.*.routing.state", "indices.*.shards.*.routing.node",
	"indices.*.shards.*.routing.primary", "indices.*.shards.*.refresh.total", "indices.*.shards.*.refresh.external_total"}

func (e *engine) Refreshes(ctx context.Context, index string) (map[string]int64, error) {
	op := "refresh stats of " + index
	_, ans, err := e.doAdmin(ctx, op, adminRequest{api: apiRefreshStats, index: index})
	if err != nil {
		return nil, err
	}
	var st struct {
		Indices map[string]struct {
			Shards map[string][]struct {
				Routing struct {
					State   string `json:"state"`
					Node    string `json:"node"`
					Primary bool   `json:"primary"`
				} `json:"routing"`
				Refresh struct {
					Total         int64  `json:"total"`
					ExternalTotal *int64 `json:"external_total"`
				} `json:"refresh"`
			} `json:"shards"`
		} `json:"indices"`
	}
	if err := decodeInto(e.kind, op, ans, &st); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for name, ix := range st.Indices {
		for shard, copies := range ix.Shards {
			for _, c := range copies {
				if c.Routing.State != "STARTED" {
					continue
				}
				n := c.Refresh.Total
				if c.Refresh.ExternalTotal != nil {
					n = *c.Refresh.ExternalTotal
				}
				out[name+"/"+shard+"/"+c.Routing.Node] = n
			}
		}
	}
	return out, nil
}
