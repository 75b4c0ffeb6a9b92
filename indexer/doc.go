// Package indexer owns searchsync's conversation with the search engine: the
// Engine seam (engine.go) and its two adapters — OpenSearch 2 through
// opensearch-go/v4 and Elasticsearch 8 through go-elasticsearch/v8 — which
// share one wire format (wire.go: NDJSON _bulk with version_type=external,
// _mget, index definitions, aliases, search, count); the Admin seam beside
// Engine for maintenance jobs such as reindex (admin.go: scroll, counts per
// group, dynamic settings, health, the engine's _reindex as a task); the
// bulk Writer that batches ops, bounds concurrency, reads every item of
// every answer and classifies it (Classify) for the search consumer and
// the reindex alike; RawBulkRate, the engine's own _bulk rate used as
// the denominator of the end-to-end benchmark; and the subset of that API
// Amazon OpenSearch Serverless serves (serverless.go: what it lacks is an
// *UnsupportedError, never sent).
//
// Errors: an answer of the engine with status >= 400 is an *EngineError
// (status, the engine's error type and reason); no answer at all is a
// *TransportError. Callers decide with the predicates of errors.go
// (IsTemporary: retrying can help — no answer, 429, 5xx; IsForbidden: 401
// or 403; IsIndexNotFound, IsAlreadyExists, IsUnsupported), never with a
// status code or an error type of their own. The clients' own retries are off, so that a failure
// is reported once and promptly. The Writer retries only the failing items
// of an answered request (429 rejected execution, 5xx) for a few seconds;
// a failure of the engine as a whole (no answer, the whole request refused,
// a cluster block, a missing index) is delivery.Unavailable at once, the relay
// pauses the search consumer and probes it (Engine.Ping and
// Engine.WriteBlocks) until it can write again. docs/outages.md has the
// whole table.
//
// The contract suite in enginetest runs against real engines: OpenSearch
// directly, Elasticsearch 8 where Docker is available, and the Elasticsearch
// adapter also against the OpenSearch node through a test-only proxy that
// adds the X-Elastic-Product header the v8 client insists on.
package indexer
