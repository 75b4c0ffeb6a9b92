package indexer

import (
	"context"
	"fmt"
	"net/http"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
)

// OpenSearch is the Engine adapter for OpenSearch 2, built on
// opensearch-go/v4 (the opensearchapi request types, sent through the
// client's transport; answers are decoded by the shared wire code).
type OpenSearch struct {
	engine
	client *opensearchapi.Client
}

// NewOpenSearch connects to cfg.URLs (default http://127.0.0.1:9200) with
// cfg's TLS and credentials (connect.go: basic, API key, bearer or SigV4).
// See New about hc and retries.
func NewOpenSearch(cfg Config, hc *http.Client) (*OpenSearch, error) {
	cn, err := connect(cfg, hc)
	if err != nil {
		return nil, err
	}
	c, err := opensearchapi.NewClient(opensearchapi.Config{Client: opensearch.Config{
		Addresses:    cn.addresses,
		Transport:    cn.transport,
		DisableRetry: true,
	}})
	if err != nil {
		return nil, fmt.Errorf("indexer: opensearch client for %v: %w", cfg.URLs, err)
	}
	o := &OpenSearch{client: c}
	o.engine = engine{kind: "opensearch", s: osSender{c}, conn: cn, serverless: isServerless(cfg)}
	return o, nil
}

// Close releases the client's background resources.
func (o *OpenSearch) Close() error { return o.client.Close() }

type osSender struct{ c *opensearchapi.Client }

func (s osSender) send(ctx context.Context, r request) (int, []byte, error) {
	var (
		req    opensearch.Request
		method = http.MethodPost
		idx    = []string{r.index}
		body   = bodyReader(r.body)
	)
	switch r.api {
	case apiPing:
		req, method = opensearchapi.PingReq{}, http.MethodHead
	case apiBlocks:
		req, method = opensearchapi.ClusterStateReq{Metrics: []string{"blocks"}}, http.MethodGet
	case apiBulk:
		req = opensearchapi.BulkReq{Body: body, Params: opensearchapi.BulkParams{FilterPath: bulkFilterPath}}
	case apiMGet:
		req = opensearchapi.MGetReq{Index: r.index, Body: body}
	case apiCreateIndex:
		req, method = opensearchapi.IndicesCreateReq{Index: r.index, Body: body}, http.MethodPut
	case apiDeleteIndex:
		req, method = opensearchapi.IndicesDeleteReq{Indices: idx}, http.MethodDelete
	case apiGetIndex:
		req, method = opensearchapi.IndicesGetReq{Indices: idx}, http.MethodGet
	case apiGetAlias:
		req, method = opensearchapi.AliasGetReq{Alias: idx}, http.MethodGet
	case apiUpdateAliases:
		req = opensearchapi.AliasesReq{Body: body}
	case apiRefresh:
		req = opensearchapi.IndicesRefreshReq{Index: idx}
	case apiSearch:
		v := true
		req = &opensearchapi.SearchReq{Indices: idx, Body: body, Params: opensearchapi.SearchParams{Version: &v}}
	case apiCount:
		req = opensearchapi.IndicesCountReq{Indices: idx, Body: body}
	case apiAuthenticate:
		req, method = pathReq("/_plugins/_security/authinfo"), http.MethodGet
	default:
		return 0, nil, fmt.Errorf("opensearch: unknown api %d", r.api)
	}
	return s.do(ctx, method, req)
}

// do carries req and reads the whole answer; send and sendAdmin only pick
// the request type and method.
func (s osSender) do(ctx context.Context, method string, req opensearch.Request) (int, []byte, error) {
	// A nil data pointer: the client does not decode, the shared wire code does.
	resp, err := opensearch.Do[struct{}](ctx, s.c.Client, method, req, nil)
	if err != nil {
		return 0, nil, err
	}
	return readAnswer(resp.StatusCode, resp.Body)
}
