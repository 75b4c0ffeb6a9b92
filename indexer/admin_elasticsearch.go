package indexer

import (
	"context"
	"fmt"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// sendAdmin carries the Admin requests with the esapi request types
// (answers are decoded by admin.go).
func (s esSender) sendAdmin(ctx context.Context, r adminRequest) (int, []byte, error) {
	var (
		req  esapi.Request
		idx  = []string{r.index}
		body = bodyReader(r.body)
		yes  = true
		no   = false
	)
	switch r.api {
	case apiScrollStart:
		req = esapi.SearchRequest{Index: idx, Body: body, Scroll: r.keep, Version: &yes}
	case apiScrollNext:
		req = esapi.ScrollRequest{Body: body, Scroll: r.keep} // the id in the body, not the path
	case apiScrollClear:
		req = esapi.ClearScrollRequest{Body: body}
	case apiAggregate:
		req = esapi.SearchRequest{Index: idx, Body: body}
	case apiPutSettings:
		req = esapi.IndicesPutSettingsRequest{Index: idx, Body: body}
	case apiPutMapping:
		req = esapi.IndicesPutMappingRequest{Index: idx, Body: body}
	case apiHealth:
		req = esapi.ClusterHealthRequest{Index: idx, WaitForStatus: r.status, Timeout: r.timeout}
	case apiCopy:
		req = esapi.ReindexRequest{Body: body, WaitForCompletion: &no, Slices: r.slices}
	case apiTaskGet:
		q := esapi.TasksGetRequest{TaskID: r.id}
		if r.timeout > 0 {
			q.WaitForCompletion, q.Timeout = &yes, r.timeout
		}
		req = q
	case apiTaskCancel:
		req = esapi.TasksCancelRequest{TaskID: r.id}
	case apiRefreshStats:
		req = esapi.IndicesStatsRequest{Index: idx, Metric: []string{"refresh"}, Level: "shards", FilterPath: refreshStatsFilter}
	default:
		return 0, nil, fmt.Errorf("elasticsearch: unknown admin api %d", r.api)
	}
	return s.do(ctx, req)
}
