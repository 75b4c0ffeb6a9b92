package indexer

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// Elasticsearch is the Engine adapter for Elasticsearch 8, built on
// go-elasticsearch/v8 (the esapi request types; answers are decoded by the
// shared wire code).
//
// The v8 client checks that the server sends X-Elastic-Product:
// Elasticsearch on its first successful answer and refuses to talk to
// anything else; such a refusal is reported as a configuration error (not a
// transport failure), since retrying cannot fix it.
type Elasticsearch struct {
	engine
	client *elasticsearch.Client
}

// NewElasticsearch connects to cfg.URLs (default http://127.0.0.1:9200) or
// cfg.CloudID with cfg's TLS and credentials (connect.go). See New about hc
// and retries.
func NewElasticsearch(cfg Config, hc *http.Client) (*Elasticsearch, error) {
	cn, err := connect(cfg, hc)
	if err != nil {
		return nil, err
	}
	c, err := elasticsearch.NewClient(elasticsearch.Config{
		Addresses:    cn.addresses,
		Transport:    cn.transport,
		DisableRetry: true,
	})
	if err != nil {
		return nil, fmt.Errorf("indexer: elasticsearch client for %v: %w", cfg.URLs, err)
	}
	e := &Elasticsearch{client: c}
	e.engine = engine{kind: "elasticsearch", s: esSender{c}, conn: cn}
	return e, nil
}

// Close releases the client's resources.
func (e *Elasticsearch) Close() error { return e.client.Close(context.Background()) }

type esSender struct{ c *elasticsearch.Client }

func (s esSender) send(ctx context.Context, r request) (int, []byte, error) {
	var (
		req  esapi.Request
		idx  = []string{r.index}
		body = bodyReader(r.body)
	)
	switch r.api {
	case apiPing:
		req = esapi.PingRequest{}
	case apiBlocks:
		req = esapi.ClusterStateRequest{Metric: []string{"blocks"}}
	case apiBulk:
		req = esapi.BulkRequest{Body: body, FilterPath: bulkFilterPath}
	case apiMGet:
		req = esapi.MgetRequest{Index: r.index, Body: body}
	case apiCreateIndex:
		req = esapi.IndicesCreateRequest{Index: r.index, Body: body}
	case apiDeleteIndex:
		req = esapi.IndicesDeleteRequest{Index: idx}
	case apiGetIndex:
		req = esapi.IndicesGetRequest{Index: idx}
	case apiGetAlias:
		req = esapi.IndicesGetAliasRequest{Name: idx}
	case apiUpdateAliases:
		req = esapi.IndicesUpdateAliasesRequest{Body: body}
	case apiRefresh:
		req = esapi.IndicesRefreshRequest{Index: idx}
	case apiSearch:
		v := true
		req = esapi.SearchRequest{Index: idx, Body: body, Version: &v}
	case apiCount:
		req = esapi.CountRequest{Index: idx, Body: body}
	case apiAuthenticate:
		req = esapi.SecurityAuthenticateRequest{}
	default:
		return 0, nil, fmt.Errorf("elasticsearch: unknown api %d", r.api)
	}
	return s.do(ctx, req)
}

// do carries req and reads the whole answer; send and sendAdmin only pick
// the request type.
func (s esSender) do(ctx context.Context, req esapi.Request) (int, []byte, error) {
	res, err := req.Do(ctx, s.c)
	if err != nil {
		// The client's product check has no exported error value; its
		// message is stable across v8 releases.
		if strings.Contains(err.Error(), "not Elasticsearch") {
			return 0, nil, fmt.Errorf("%w: %w", errWrongProduct, err)
		}
		return 0, nil, err
	}
	return readAnswer(res.StatusCode, res.Body)
}
