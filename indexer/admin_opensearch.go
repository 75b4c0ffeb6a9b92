package indexer

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
)

// sendAdmin carries the Admin requests with the opensearchapi request
// types (answers are decoded by admin.go).
func (s osSender) sendAdmin(ctx context.Context, r adminRequest) (int, []byte, error) {
	var (
		req    opensearch.Request
		method = http.MethodPost
		idx    = []string{r.index}
		body   = bodyReader(r.body)
		yes    = true
		no     = false
	)
	switch r.api {
	case apiScrollStart:
		req = &opensearchapi.SearchReq{Indices: idx, Body: body, Params: opensearchapi.SearchParams{Scroll: r.keep, Version: &yes}}
	case apiScrollNext:
		req = opensearchapi.ScrollGetReq{ScrollID: r.id, Params: opensearchapi.ScrollGetParams{Scroll: r.keep}}
	case apiScrollClear:
		req, method = opensearchapi.ScrollDeleteReq{Body: body}, http.MethodDelete
	case apiAggregate:
		req = &opensearchapi.SearchReq{Indices: idx, Body: body}
	case apiPutSettings:
		req, method = opensearchapi.SettingsPutReq{Indices: idx, Body: body}, http.MethodPut
	case apiPutMapping:
		req, method = opensearchapi.MappingPutReq{Indices: idx, Body: body}, http.MethodPut
	case apiHealth:
		req, method = opensearchapi.ClusterHealthReq{Indices: idx, Params: opensearchapi.ClusterHealthParams{WaitForStatus: r.status, Timeout: r.timeout}}, http.MethodGet
	case apiCopy:
		req = opensearchapi.ReindexReq{Body: body, Params: opensearchapi.ReindexParams{WaitForCompletion: &no, Slices: r.slices}}
	case apiTaskGet:
		p := opensearchapi.TasksGetParams{}
		if r.timeout > 0 {
			p.WaitForCompletion, p.Timeout = &yes, r.timeout
		}
		req, method = opensearchapi.TasksGetReq{TaskID: r.id, Params: p}, http.MethodGet
	case apiTaskCancel:
		req = opensearchapi.TasksCancelReq{TaskID: r.id}
	case apiRefreshStats:
		// IndicesStatsParams of opensearch-go v4 has no level: the path
		// with its query, as for authinfo.
		req, method = pathReq("/"+url.PathEscape(r.index)+"/_stats/refresh?level=shards&filter_path="+url.QueryEscape(strings.Join(refreshStatsFilter, ","))), http.MethodGet
	default:
		return 0, nil, fmt.Errorf("opensearch: unknown admin api %d", r.api)
	}
	return s.do(ctx, method, req)
}
