package indexer

import (
	"context"
	"encoding/json"
)

// Engine is the seam between searchsync and a search engine. Two adapters
// implement it: Elasticsearch 8 (go-elasticsearch/v8) and OpenSearch 2
// (opensearch-go/v4); both must pass the contract suite in enginetest.
//
// Every method returns an *EngineError for answers of the engine (with the
// HTTP status and the engine's error type and reason) and a plain wrapped error
// for transport failures, so that callers can tell retry from poison.
type Engine interface {
	// Kind is "opensearch" or "elasticsearch".
	Kind() string
	// Ping checks that the engine answers (used by /readyz and by the
	// search consumer's probe while it is paused).
	Ping(ctx context.Context) error
	// WriteBlocks returns the blocks that refuse writes to the given
	// physical indexes now: cluster-wide ones and those of the indexes
	// (index.blocks.write, read_only, read_only_allow_delete — the disk
	// flood-stage watermark's). One cheap request (the blocks of the
	// cluster state); none: an empty slice.
	WriteBlocks(ctx context.Context, indexes ...string) ([]Block, error)
	// Bulk sends one NDJSON _bulk request and returns one result per op, in
	// order. It reads every item; the HTTP status of the whole request only
	// decides transport-level errors.
	Bulk(ctx context.Context, ops []BulkOp) ([]BulkResult, error)
	// MGet fetches documents by id from one index or alias; missing ids are
	// absent from the map.
	MGet(ctx context.Context, index string, ids []string) (map[string]Doc, error)
	// CreateIndex creates a physical index with the given body (settings,
	// mappings incl. _meta, aliases).
	CreateIndex(ctx context.Context, name string, body json.RawMessage) error
	// DeleteIndex deletes a physical index; a missing index is not an error.
	DeleteIndex(ctx context.Context, name string) error
	// GetIndex returns the live settings and mappings of one physical index,
	// or nil when it does not exist.
	GetIndex(ctx context.Context, name string) (*IndexInfo, error)
	// AliasTargets returns the physical indexes an alias points to (empty when
	// the alias does not exist).
	AliasTargets(ctx context.Context, alias string) ([]string, error)
	// UpdateAliases applies all actions in one atomic _aliases call.
	UpdateAliases(ctx context.Context, actions []AliasAction) error
	// Refresh makes recent writes searchable: several indexes in one
	// request, so that they are refreshed at (nearly) the same moment. At
	// least one index must be named (none is an error, not every index).
	Refresh(ctx context.Context, indexes ...string) error
	// Search runs a query body against an index or alias and returns the raw
	// hits and total.
	Search(ctx context.Context, index string, body json.RawMessage) (*SearchResult, error)
	// Count counts the documents matching a query body (nil: all).
	Count(ctx context.Context, index string, body json.RawMessage) (int64, error)
}

// OpType is the bulk action.
type OpType string

const (
	OpIndex  OpType = "index"
	OpDelete OpType = "delete"
)

// BulkOp is one action of a _bulk request. Version is always sent with
// version_type=external.
type BulkOp struct {
	Type    OpType
	Index   string
	ID      string
	Version int64
	Routing string // optional
	// RequireAlias makes an index op fail (404 index_not_found, handled
	// like an unavailable index) instead of auto-creating an index named
	// like the alias when the alias does not exist. Set it for writes
	// through an alias; a physical index name must not use it.
	RequireAlias bool
	Doc          json.RawMessage // the whole document, for OpIndex
	// Compact says Doc is one line of valid JSON, as json.Marshal writes
	// it: the request copies it as it is. Without it Doc is compacted onto
	// one line, which also checks it (an invalid line would spoil the whole
	// NDJSON request, not only its item).
	Compact bool
	// SameVersion writes with version_type external_gte: a document the
	// index holds at this very version is replaced too (a full-state
	// snapshot over a document partial events built, projections.Fold).
	SameVersion bool
	// Guarded writes without an external version, conditioned on what was
	// read instead (the documents that relations reach, whose sources
	// keep their versions inside the document): an index op replaces the
	// document only while it is at IfSeqNo/IfPrimaryTerm, and Create makes
	// it only where there is none. A 409 answer is then a conflict (another
	// writer came first: read again and fold again), not a stale write;
	// BulkResult.Conflict says so. Version is only reported.
	Guarded       bool
	Create        bool
	IfSeqNo       int64
	IfPrimaryTerm int64
}

// BulkResult is the engine's answer for one op.
type BulkResult struct {
	Status    int    // HTTP status of the item (200, 201, 404, 409, 429, 400, 5xx …)
	ErrType   string // e.g. version_conflict_engine_exception, mapper_parsing_exception
	ErrReason string
	Version   int64  // the version the engine holds after the op, when given
	Result    string // created, updated, deleted, not_found, noop (empty on errors)
	// SeqNo and PrimaryTerm are the document's after a successful op.
	SeqNo, PrimaryTerm int64
}

// Doc is a stored document.
type Doc struct {
	Source  json.RawMessage
	Version int64
	// SeqNo and PrimaryTerm are what a guarded write (BulkOp.Guarded) is
	// conditioned on.
	SeqNo, PrimaryTerm int64
}

// IndexInfo is the live definition of a physical index.
type IndexInfo struct {
	Name     string
	Settings json.RawMessage // the index's settings as the engine returns them
	Mappings json.RawMessage // the index's mappings (incl. _meta)
	Aliases  []string
}

// Block is a block of the cluster or of one index that refuses writes.
type Block struct {
	Index       string // empty for a cluster-wide block
	ID          string // the engine's block id, e.g. "8"
	Description string // e.g. "disk usage exceeded flood-stage watermark, index has read-only-allow-delete block"
}

func (b Block) String() string {
	where := "cluster"
	if b.Index != "" {
		where = "index " + b.Index
	}
	return where + ": " + b.Description
}

// AliasAction is one action of an atomic _aliases call.
type AliasAction struct {
	Add         bool            // true: add, false: remove
	Index       string          // physical index
	Alias       string          // alias name
	Filter      json.RawMessage // optional filter (add only)
	IsWriteIdx  *bool           // optional is_write_index (add only)
	RemoveIndex bool            // true: remove_index (delete the physical index atomically)
}

// SearchResult is the part of a search answer searchsync uses.
type SearchResult struct {
	Total int64
	Hits  []Hit
}

// Hit is one search hit.
type Hit struct {
	Index   string
	ID      string
	Version int64
	Source  json.RawMessage
}
