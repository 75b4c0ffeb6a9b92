package indexer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

// New returns the adapter that cfg.Kind names ("opensearch", the default, or
// "elasticsearch"). hc supplies the HTTP transport (nil: a default one); its
// Timeout is not used, every call is bounded by its context instead.
//
// The clients' own retries are switched off: retrying belongs to the Writer
// (per item, with backoff) and to the relay (per event), so that a failure is
// reported once, promptly, and with what the engine said.
func New(cfg Config, hc *http.Client) (Engine, error) {
	cfg = cfg.WithDefaults()
	switch strings.ToLower(cfg.Kind) {
	case "opensearch":
		return NewOpenSearch(cfg, hc)
	case "elasticsearch":
		return NewElasticsearch(cfg, hc)
	default:
		return nil, fmt.Errorf("indexer: engine.kind %q: want opensearch or elasticsearch", cfg.Kind)
	}
}

// Close releases the resources of an engine made by New (idle connections,
// background goroutines of the client); engines without any are left alone.
func Close(eng Engine) error {
	if c, ok := eng.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// api names the engine endpoints searchsync calls.
type api int

const (
	apiPing api = iota
	apiBlocks
	apiBulk
	apiMGet
	apiCreateIndex
	apiDeleteIndex
	apiGetIndex
	apiGetAlias
	apiUpdateAliases
	apiRefresh
	apiSearch
	apiCount
	apiAuthenticate
)

// request is one call: the endpoint, the index (or alias) in its path and
// the JSON/NDJSON body.
type request struct {
	api   api
	index string
	body  []byte
}

// sender carries one request with a concrete client. err is set only when
// there is no answer (transport failure, cancelled context, a server that
// is not the product the client expects); any HTTP answer, 4xx and 5xx
// included, comes back as status and body.
type sender interface {
	send(ctx context.Context, r request) (status int, body []byte, err error)
}

// errWrongProduct marks an answer from a server of the other kind (the
// Elasticsearch client's product check); it is a configuration error, not a
// transport failure.
var errWrongProduct = errors.New("the server is not the engine kind configured (check engine.kind)")

// engine implements Engine on top of a sender; the wire format is shared
// (wire.go), the adapters only differ in their sender.
type engine struct {
	kind string
	s    sender
	conn *conn // nil in tests of the wire code
	// serverless: Amazon OpenSearch Serverless; requests it does not serve
	// are not sent (serverless.go).
	serverless bool
}

// do performs r and turns failures into *TransportError (no answer) or
// *EngineError (an answer with status >= 400, unless accepted by okStatus).
func (e *engine) do(ctx context.Context, op string, r request, okStatus ...int) (int, []byte, error) {
	if e.serverless {
		if lacks := serverlessLacks(r.api); lacks != "" {
			return 0, nil, &UnsupportedError{Op: e.kind + " " + op, API: lacks}
		}
	}
	status, body, err := e.s.send(ctx, r)
	return e.answer(op, status, body, err, okStatus)
}

// answer classifies what a sender returned for op (see do); Engine and
// Admin calls share it.
func (e *engine) answer(op string, status int, body []byte, err error, okStatus []int) (int, []byte, error) {
	if err != nil {
		var ce *ConfigError
		if errors.Is(err, errWrongProduct) || errors.As(err, &ce) {
			return 0, nil, fmt.Errorf("%s %s: %w", e.kind, op, err)
		}
		return 0, nil, &TransportError{Op: e.kind + " " + op, Err: err}
	}
	if status >= 400 && !slices.Contains(okStatus, status) {
		ee := engineError(e.kind+" "+op, status, body)
		e.explain(ee)
		return status, body, ee
	}
	return status, body, nil
}

// readAnswer reads and closes an answer's body (nil: none, as for HEAD);
// the senders use it once the client has carried the request.
func readAnswer(status int, body io.ReadCloser) (int, []byte, error) {
	if body == nil {
		return status, nil, nil
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return 0, nil, fmt.Errorf("read answer: %w", err)
	}
	return status, b, nil
}

func (e *engine) Kind() string { return e.kind }

func (e *engine) Ping(ctx context.Context) error {
	var ok []int
	if e.serverless {
		// Serverless does not serve the root: its 404 is the answer (a
		// refused signature is still a 403).
		ok = []int{http.StatusNotFound}
	}
	_, _, err := e.do(ctx, "ping", request{api: apiPing}, ok...)
	return err
}

func (e *engine) WriteBlocks(ctx context.Context, indexes ...string) ([]Block, error) {
	if e.serverless {
		// No cluster state is served, and a collection has no blocks a
		// client sets or sees.
		return []Block{}, nil
	}
	_, body, err := e.do(ctx, "cluster blocks", request{api: apiBlocks})
	if err != nil {
		return nil, err
	}
	return decodeWriteBlocks(body, indexes)
}

func (e *engine) Bulk(ctx context.Context, ops []BulkOp) ([]BulkResult, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	size := 0
	for i := range ops {
		size += opSize(&ops[i])
	}
	buf.Grow(size) // one allocation, not a doubling per size
	if err := encodeBulk(&buf, ops); err != nil {
		return nil, fmt.Errorf("%s bulk: %w", e.kind, err)
	}
	_, body, err := e.do(ctx, fmt.Sprintf("bulk of %d ops", len(ops)), request{api: apiBulk, body: buf.Bytes()})
	if err != nil {
		return nil, err
	}
	res, err := decodeBulk(len(ops), body)
	if err != nil {
		return nil, fmt.Errorf("%s bulk: %w", e.kind, err)
	}
	return res, nil
}

func (e *engine) MGet(ctx context.Context, index string, ids []string) (map[string]Doc, error) {
	if len(ids) == 0 {
		return map[string]Doc{}, nil
	}
	_, body, err := e.do(ctx, "mget "+index, request{api: apiMGet, index: index, body: encodeIDs(ids)})
	if err != nil {
		return nil, err
	}
	return decodeMGet(index, body)
}

func (e *engine) CreateIndex(ctx context.Context, name string, body json.RawMessage) error {
	_, _, err := e.do(ctx, "create index "+name, request{api: apiCreateIndex, index: name, body: body})
	return err
}

func (e *engine) DeleteIndex(ctx context.Context, name string) error {
	_, _, err := e.do(ctx, "delete index "+name, request{api: apiDeleteIndex, index: name}, http.StatusNotFound)
	return err
}

func (e *engine) GetIndex(ctx context.Context, name string) (*IndexInfo, error) {
	status, body, err := e.do(ctx, "get index "+name, request{api: apiGetIndex, index: name}, http.StatusNotFound)
	if err != nil || status == http.StatusNotFound {
		return nil, err
	}
	return decodeGetIndex(name, body)
}

func (e *engine) AliasTargets(ctx context.Context, alias string) ([]string, error) {
	status, body, err := e.do(ctx, "get alias "+alias, request{api: apiGetAlias, index: alias}, http.StatusNotFound)
	if err != nil || status == http.StatusNotFound {
		return nil, err
	}
	return decodeAliasTargets(alias, body)
}

func (e *engine) UpdateAliases(ctx context.Context, actions []AliasAction) error {
	body, err := encodeAliases(actions)
	if err != nil {
		return fmt.Errorf("%s update aliases: %w", e.kind, err)
	}
	_, _, err = e.do(ctx, "update aliases", request{api: apiUpdateAliases, body: body})
	return err
}

func (e *engine) Refresh(ctx context.Context, indexes ...string) error {
	if len(indexes) == 0 || slices.Contains(indexes, "") {
		// An empty path would refresh every index of the cluster.
		return fmt.Errorf("%s refresh: no index named (%q)", e.kind, indexes)
	}
	index := strings.Join(indexes, ",")
	_, _, err := e.do(ctx, "refresh "+index, request{api: apiRefresh, index: index})
	return err
}

func (e *engine) Search(ctx context.Context, index string, body json.RawMessage) (*SearchResult, error) {
	_, b, err := e.do(ctx, "search "+index, request{api: apiSearch, index: index, body: body})
	if err != nil {
		return nil, err
	}
	return decodeSearch(index, b)
}

func (e *engine) Count(ctx context.Context, index string, body json.RawMessage) (int64, error) {
	_, b, err := e.do(ctx, "count "+index, request{api: apiCount, index: index, body: body})
	if err != nil {
		return 0, err
	}
	return decodeCount(index, b)
}
