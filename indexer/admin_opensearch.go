package indexer

import (
	"context"
	"fmt"
	"net/http"

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
	default:
		return 0, nil, fmt.Errorf("opensearch: unknown admin api %d", r.api)
	}
	return s.do(ctx, method, req)
}
