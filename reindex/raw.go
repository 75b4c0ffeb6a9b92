package reindex

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
)

// raw carries the few engine calls the indexer.Engine seam does not offer and
// that Elasticsearch 8 and OpenSearch 2 spell the same way: the scroll API
// (to walk every document of the live index), composite aggregations (counts
// per entity type and tenant) and index settings. Everything else goes
// through indexer.Engine.
type raw struct {
	urls []string
	hc   *http.Client
	err  error // a configuration that cannot connect, returned by do
}

// newRaw reaches the engine of cfg the way the adapters do (indexer.Transport:
// TLS, basic/API key/bearer/SigV4), on top of hc's transport.
func newRaw(cfg config.Engine, hc *http.Client) *raw {
	var base http.RoundTripper
	if hc != nil {
		base = hc.Transport
	}
	r := &raw{}
	rt, err := indexer.Transport(cfg, base)
	if err == nil {
		r.urls, err = cfg.Addresses()
	}
	r.hc, r.err = &http.Client{Transport: rt}, err
	if hc != nil {
		r.hc.Timeout = hc.Timeout
	}
	return r
}

// do sends one JSON request and decodes a 2xx answer into out.
func (r *raw) do(ctx context.Context, method, path string, body, out any) error {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		payload = b
	}
	if r.err != nil {
		return r.err
	}
	op := method + " " + path
	var lastErr error
	for _, base := range r.urls {
		var rd io.Reader
		if payload != nil {
			rd = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lastErr = &indexer.TransportError{Op: op, Err: err}
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			lastErr = &indexer.TransportError{Op: op, Err: err}
			continue
		}
		if resp.StatusCode >= 400 {
			var e struct {
				Error struct {
					Type   string `json:"type"`
					Reason string `json:"reason"`
				} `json:"error"`
			}
			_ = json.Unmarshal(b, &e)
			reason := e.Error.Reason
			if reason == "" {
				reason = strings.TrimSpace(string(b))
			}
			return &indexer.EngineError{Op: op, Status: resp.StatusCode, Type: e.Error.Type, Reason: reason}
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s: decode answer: %w", op, err)
		}
		return nil
	}
	return lastErr
}

// scrollHit is one document of a scroll.
type scrollHit struct {
	ID      string          `json:"_id"`
	Version int64           `json:"_version"`
	Routing string          `json:"_routing"`
	Source  json.RawMessage `json:"_source"`
}

type scrollPage struct {
	ScrollID string `json:"_scroll_id"`
	Hits     struct {
		Total struct {
			Value int64 `json:"value"`
		} `json:"total"`
		Hits []scrollHit `json:"hits"`
	} `json:"hits"`
}

// scroll walks every document of index matching query (nil: all), size per
// page, calling fn per page. source false fetches ids and versions only.
func (r *raw) scroll(ctx context.Context, index string, query json.RawMessage, size int, source bool, fn func(total int64, hits []scrollHit) error) error {
	const keep = "5m"
	body := map[string]any{"size": size, "version": true, "sort": []string{"_doc"}, "_source": source}
	if query != nil {
		body["query"] = query
	}
	var page scrollPage
	if err := r.do(ctx, http.MethodPost, "/"+index+"/_search?scroll="+keep, body, &page); err != nil {
		return fmt.Errorf("scroll %s: %w", index, err)
	}
	ids := []string{}
	defer func() {
		if len(ids) > 0 {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = r.do(c, http.MethodDelete, "/_search/scroll", map[string]any{"scroll_id": ids}, nil)
		}
	}()
	for {
		if page.ScrollID != "" && (len(ids) == 0 || ids[len(ids)-1] != page.ScrollID) {
			ids = append(ids[:0], page.ScrollID)
		}
		if len(page.Hits.Hits) == 0 {
			return nil
		}
		if err := fn(page.Hits.Total.Value, page.Hits.Hits); err != nil {
			return err
		}
		id := page.ScrollID
		page = scrollPage{}
		if err := r.do(ctx, http.MethodPost, "/_search/scroll", map[string]any{"scroll": keep, "scroll_id": id}, &page); err != nil {
			return fmt.Errorf("scroll %s: %w", index, err)
		}
	}
}

// groupCounts counts the documents of index matching query per combination
// of the values of fields (a composite aggregation, paged). A missing value
// is counted under "".
func (r *raw) groupCounts(ctx context.Context, index string, query json.RawMessage, fields []string) (map[string]int64, int64, error) {
	out := map[string]int64{}
	if len(fields) == 0 {
		var c struct {
			Count int64 `json:"count"`
		}
		body := map[string]any{}
		if query != nil {
			body["query"] = query
		}
		if err := r.do(ctx, http.MethodPost, "/"+index+"/_count", body, &c); err != nil {
			return nil, 0, fmt.Errorf("count %s: %w", index, err)
		}
		out[""] = c.Count
		return out, c.Count, nil
	}
	sources := make([]map[string]any, len(fields))
	for i, f := range fields {
		sources[i] = map[string]any{f: map[string]any{"terms": map[string]any{"field": f, "missing_bucket": true}}}
	}
	var after map[string]any
	var total int64
	for {
		comp := map[string]any{"size": 1000, "sources": sources}
		if after != nil {
			comp["after"] = after
		}
		body := map[string]any{"size": 0, "track_total_hits": true, "aggs": map[string]any{"g": map[string]any{"composite": comp}}}
		if query != nil {
			body["query"] = query
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
		if err := r.do(ctx, http.MethodPost, "/"+index+"/_search", body, &resp); err != nil {
			return nil, 0, fmt.Errorf("count %s by %s: %w", index, strings.Join(fields, ","), err)
		}
		total = resp.Hits.Total.Value
		for _, b := range resp.Aggs.G.Buckets {
			parts := make([]string, len(fields))
			for i, f := range fields {
				if v := b.Key[f]; v != nil {
					parts[i] = fmt.Sprint(v)
				}
			}
			out[strings.Join(parts, "/")] += b.DocCount
		}
		if len(resp.Aggs.G.Buckets) == 0 || resp.Aggs.G.AfterKey == nil {
			return out, total, nil
		}
		after = resp.Aggs.G.AfterKey
	}
}

// putSettings changes dynamic index settings.
func (r *raw) putSettings(ctx context.Context, index string, settings map[string]any) error {
	if err := r.do(ctx, http.MethodPut, "/"+index+"/_settings", map[string]any{"index": settings}, nil); err != nil {
		return fmt.Errorf("update settings of %s: %w", index, err)
	}
	return nil
}

// health returns the health of index (green, yellow or red). With
// waitFor set it first waits up to timeout for that status; timedOut says
// that it did not come.
func (r *raw) health(ctx context.Context, index, waitFor string, timeout time.Duration) (status string, timedOut bool, err error) {
	path := "/_cluster/health/" + index
	if waitFor != "" {
		path += "?wait_for_status=" + waitFor + "&timeout=" + strconv.Itoa(int(timeout.Milliseconds())) + "ms"
	}
	var h struct {
		Status   string `json:"status"`
		TimedOut bool   `json:"timed_out"`
	}
	err = r.do(ctx, http.MethodGet, path, nil, &h)
	if ee, ok := indexer.AsEngineError(err); ok && ee.Status == http.StatusRequestTimeout {
		return "", true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("health of %s: %w", index, err)
	}
	return h.Status, h.TimedOut, nil
}

// taskStatus is the part of a _reindex task's status searchsync reads.
type taskStatus struct {
	Total            int64 `json:"total"`
	Created          int64 `json:"created"`
	Updated          int64 `json:"updated"`
	VersionConflicts int64 `json:"version_conflicts"`
}

// copyServerSide copies the documents of source matching query to dest with
// the engine's _reindex (the documents never leave the engine), keeping
// each document's version as external version; version conflicts (dest
// holds that version or a newer one) are counted, not errors. progress is
// called about every second. A cancelled ctx cancels the task.
func (r *raw) copyServerSide(ctx context.Context, source, dest string, query json.RawMessage, batch, slices int, started func(task string), progress func(taskStatus)) (taskStatus, error) {
	src := map[string]any{"index": source, "size": batch}
	if query != nil {
		src["query"] = query
	}
	body := map[string]any{"conflicts": "proceed", "source": src, "dest": map[string]any{"index": dest, "version_type": "external"}}
	var task struct {
		Task string `json:"task"`
	}
	if err := r.do(ctx, http.MethodPost, "/_reindex?wait_for_completion=false&slices="+strconv.Itoa(max(slices, 1)), body, &task); err != nil {
		return taskStatus{}, fmt.Errorf("copy %s to %s: %w", source, dest, err)
	}
	if started != nil {
		started(task.Task)
	}
	for {
		var t struct {
			Completed bool `json:"completed"`
			Task      struct {
				Status taskStatus `json:"status"`
			} `json:"task"`
			Error *struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"error"`
			Response *struct {
				Failures []json.RawMessage `json:"failures"`
			} `json:"response"`
		}
		// Waits up to a second for the task to complete: progress every
		// second, completion noticed at once.
		err := r.do(ctx, http.MethodGet, "/_tasks/"+task.Task+"?wait_for_completion=true&timeout=1s", nil, &t)
		if ee, ok := indexer.AsEngineError(err); ok && ee.Status == http.StatusRequestTimeout || ok && strings.Contains(ee.Type, "timeout") {
			err = r.do(ctx, http.MethodGet, "/_tasks/"+task.Task, nil, &t)
		}
		if err != nil {
			if ctx.Err() != nil {
				c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = r.do(c, http.MethodPost, "/_tasks/"+task.Task+"/_cancel", nil, nil)
				cancel()
				return taskStatus{}, ctx.Err()
			}
			return taskStatus{}, fmt.Errorf("copy %s to %s: task %s: %w", source, dest, task.Task, err)
		}
		if progress != nil {
			progress(t.Task.Status)
		}
		if t.Completed {
			switch {
			case t.Error != nil:
				return t.Task.Status, fmt.Errorf("copy %s to %s: %s: %s", source, dest, t.Error.Type, t.Error.Reason)
			case t.Response != nil && len(t.Response.Failures) > 0:
				return t.Task.Status, fmt.Errorf("copy %s to %s: %d documents failed, first: %s", source, dest, len(t.Response.Failures), t.Response.Failures[0])
			}
			return t.Task.Status, nil
		}
		if ctx.Err() != nil {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = r.do(c, http.MethodPost, "/_tasks/"+task.Task+"/_cancel", nil, nil)
			cancel()
			return taskStatus{}, ctx.Err()
		}
	}
}

// cancelTask cancels an engine task; a task that is gone is not an error.
func (r *raw) cancelTask(ctx context.Context, task string) error {
	err := r.do(ctx, http.MethodPost, "/_tasks/"+task+"/_cancel", nil, nil)
	if ee, ok := indexer.AsEngineError(err); ok && ee.Status == http.StatusNotFound {
		return nil
	}
	return err
}
