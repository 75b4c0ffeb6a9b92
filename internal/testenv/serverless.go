package testenv

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Collection is the type of an Amazon OpenSearch Serverless collection.
type Collection string

const (
	// SearchCollection takes explicit document ids (and external versions).
	SearchCollection Collection = "search"
	// TimeSeriesCollection refuses explicit document ids, as vector search
	// collections do.
	TimeSeriesCollection Collection = "timeseries"
)

// ServerlessProxy stands in front of the real OpenSearch node and refuses
// what Amazon OpenSearch Serverless refuses, so that tests prove searchsync
// keeps to the API Serverless serves. The list is AWS's "Supported
// operations and plugins in Amazon OpenSearch Serverless"
// (docs.aws.amazon.com/opensearch-service/latest/developerguide/serverless-genref.html):
//
//   - every request must be signed with SigV4 for the service aoss and carry
//     X-Amz-Content-Sha256 (the body's hash), else 403 (the signature itself
//     is checked by the indexer's SigV4 tests);
//   - a method and path off the list answers 404 with an empty body, as
//     Serverless answers GET / and _refresh; among them the root, _cluster,
//     _nodes, _stats, _refresh, the scroll API (also ?scroll= on a search),
//     _reindex, _tasks, _update_by_query, _delete_by_query, _plugins;
//   - refresh=true answers 400 status_exception "true refresh policy is not
//     supported.";
//   - in a TimeSeriesCollection, every document id is refused: a bulk item
//     with an _id answers 400 illegal_argument_exception "Document ID is not
//     supported in create/index operation request", and the single-document
//     APIs with an id answer 404.
//
// Refused lists what it refused. It is closed at cleanup.
type ServerlessProxy struct {
	URL        string
	collection Collection
	rp         *httputil.ReverseProxy

	mu      sync.Mutex
	refused []string
}

// NewServerlessProxy starts a proxy to EngineURL that behaves as a
// Serverless collection of type c.
func NewServerlessProxy(t testing.TB, c Collection) *ServerlessProxy {
	t.Helper()
	target, err := url.Parse(EngineURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &ServerlessProxy{collection: c, rp: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Refused returns the requests refused so far ("GET /_cluster/health").
func (p *ServerlessProxy) Refused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

func (p *ServerlessProxy) refuse(w http.ResponseWriter, r *http.Request, status int, body any) {
	p.mu.Lock()
	p.refused = append(p.refused, r.Method+" "+r.URL.Path)
	p.mu.Unlock()
	if body == nil {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func (p *ServerlessProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sum := sha256.Sum256(body)
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !strings.Contains(auth, "/aoss/aws4_request") ||
		r.Header.Get("X-Amz-Content-Sha256") != hex.EncodeToString(sum[:]) {
		// Not recorded: searchsync signs every request, so an unsigned one
		// is another process's that found this port (a loaded machine
		// reuses ports quickly), not a refusal the tests are about.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": "requests to a collection must be signed with SigV4 for the service aoss, with X-Amz-Content-Sha256"})
		return
	}
	q := r.URL.Query()
	if q.Get("refresh") == "true" || (q.Has("refresh") && q.Get("refresh") == "") {
		reason := map[string]any{"type": "status_exception", "reason": "true refresh policy is not supported."}
		p.refuse(w, r, http.StatusBadRequest, map[string]any{"error": map[string]any{"root_cause": []any{reason},
			"type": "status_exception", "reason": "true refresh policy is not supported."}, "status": 400})
		return
	}
	if q.Has("scroll") || !p.serves(r.Method, r.URL.Path) {
		p.refuse(w, r, http.StatusNotFound, nil)
		return
	}
	r.Header.Del("Authorization")
	r.Body = io.NopCloser(bytes.NewReader(body))
	if p.collection == TimeSeriesCollection && strings.HasSuffix(r.URL.Path, "/_bulk") && p.bulkWithIDs(w, r, body) {
		return
	}
	p.rp.ServeHTTP(w, r)
}

// serves reports whether Serverless serves method on path (for the
// collection type of p).
func (p *ServerlessProxy) serves(method, path string) bool {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if segs[0] == "" {
		return false // GET / and HEAD /: not served
	}
	is := func(ms ...string) bool {
		for _, m := range ms {
			if m == method {
				return true
			}
		}
		return false
	}
	if strings.HasPrefix(segs[0], "_") {
		// Cluster-level APIs, no index in the path.
		switch api := strings.Join(segs, "/"); {
		case api == "_bulk":
			return is(http.MethodPost)
		case api == "_search", api == "_count", api == "_mget", api == "_msearch", api == "_field_caps", api == "_analyze":
			return is(http.MethodGet, http.MethodPost)
		case api == "_search/point_in_time":
			return is(http.MethodDelete)
		case api == "_cat/indices", api == "_mapping", api == "_mappings", strings.HasPrefix(api, "_resolve/index/"):
			return is(http.MethodGet)
		case api == "_aliases":
			return is(http.MethodGet, http.MethodPost)
		case api == "_alias", strings.HasPrefix(api, "_alias/"), api == "_cat/aliases":
			return is(http.MethodGet, http.MethodHead)
		case api == "_index_template", strings.HasPrefix(api, "_index_template/"):
			return is(http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete)
		}
		return false
	}
	if len(segs) == 1 { // an index
		return is(http.MethodPut, http.MethodGet, http.MethodHead, http.MethodDelete)
	}
	search := p.collection == SearchCollection
	switch api := strings.Join(segs[1:], "/"); {
	case api == "_bulk":
		return is(http.MethodPost)
	case api == "_doc":
		return is(http.MethodPost)
	case strings.HasPrefix(api, "_doc/"):
		return is(http.MethodGet, http.MethodHead, http.MethodDelete) || search && is(http.MethodPut)
	case strings.HasPrefix(api, "_create/"):
		return search && is(http.MethodPut, http.MethodPost)
	case strings.HasPrefix(api, "_update/"):
		return search && is(http.MethodPost)
	case strings.HasPrefix(api, "_source/"):
		return is(http.MethodGet, http.MethodHead)
	case api == "_search", api == "_count", api == "_mget", api == "_msearch", api == "_field_caps", api == "_analyze",
		api == "_validate/query", strings.HasPrefix(api, "_explain/"):
		return is(http.MethodGet, http.MethodPost)
	case api == "_search/point_in_time":
		return is(http.MethodPost)
	case api == "_mapping", api == "_mappings", api == "_settings", strings.HasPrefix(api, "_settings/"),
		api == "_setting", strings.HasPrefix(api, "_setting/"):
		return is(http.MethodGet, http.MethodPut, http.MethodPost)
	case api == "_alias", strings.HasPrefix(api, "_alias/"), api == "_aliases", strings.HasPrefix(api, "_aliases/"):
		return is(http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete)
	}
	return false
}

// bulkWithIDs answers a _bulk of a time series collection: every action
// with an _id is refused; the others go to the node, their answers spliced
// in order. It reports false (nothing answered) when no action has an id.
func (p *ServerlessProxy) bulkWithIDs(w http.ResponseWriter, r *http.Request, body []byte) bool {
	type line struct {
		action, index, id string
		raw               [][]byte
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		b := append([]byte(nil), sc.Bytes()...)
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var meta map[string]struct {
			Index string `json:"_index"`
			ID    string `json:"_id"`
		}
		if len(lines) > 0 && lines[len(lines)-1].action != "delete" && len(lines[len(lines)-1].raw) == 1 {
			lines[len(lines)-1].raw = append(lines[len(lines)-1].raw, b) // the document line
			continue
		}
		if json.Unmarshal(b, &meta) != nil || len(meta) != 1 {
			return false // let the node say what is wrong
		}
		for a, m := range meta {
			lines = append(lines, line{action: a, index: m.Index, id: m.ID, raw: [][]byte{b}})
		}
	}
	withID := 0
	var rest bytes.Buffer
	for _, l := range lines {
		if l.id != "" {
			withID++
			continue
		}
		for _, b := range l.raw {
			rest.Write(b)
			rest.WriteByte('\n')
		}
	}
	if withID == 0 {
		return false
	}
	p.mu.Lock()
	p.refused = append(p.refused, r.Method+" "+r.URL.Path+" (document ids)")
	p.mu.Unlock()
	var forwarded []json.RawMessage
	if rest.Len() > 0 {
		rec := httptest.NewRecorder()
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(rest.Bytes()))
		r2.ContentLength = int64(rest.Len())
		r2.URL.RawQuery = ""
		p.rp.ServeHTTP(rec, r2)
		var ans struct {
			Items []json.RawMessage `json:"items"`
		}
		if json.Unmarshal(rec.Body.Bytes(), &ans) != nil {
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return true
		}
		forwarded = ans.Items
	}
	items := make([]any, 0, len(lines))
	for _, l := range lines {
		if l.id == "" && len(forwarded) > 0 {
			items, forwarded = append(items, forwarded[0]), forwarded[1:]
			continue
		}
		items = append(items, map[string]any{l.action: map[string]any{"_index": l.index, "_id": l.id, "status": 400,
			"error": map[string]any{"type": "illegal_argument_exception", "reason": "Document ID is not supported in create/index operation request"}}})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"took": 0, "errors": true, "items": items})
	return true
}
