package indexer

import (
	"context"
	"encoding/json"
	"fmt"
)

// MetaWriter replaces the _meta of an index's mappings (PUT
// <index>/_mapping {"_meta": …}); the engines of New implement it. Package
// mapping records there what built the index.
type MetaWriter interface {
	PutMeta(ctx context.Context, index string, meta map[string]any) error
}

var (
	_ MetaWriter = (*OpenSearch)(nil)
	_ MetaWriter = (*Elasticsearch)(nil)
)

// PutMeta replaces the _meta of index's mappings with meta.
func (e *engine) PutMeta(ctx context.Context, index string, meta map[string]any) error {
	b, err := json.Marshal(map[string]any{"_meta": meta})
	if err != nil {
		return fmt.Errorf("%s update the mapping _meta of %s: %w", e.kind, index, err)
	}
	_, _, err = e.doAdmin(ctx, "update the mapping _meta of "+index, adminRequest{api: apiPutMapping, index: index, body: b})
	return err
}
