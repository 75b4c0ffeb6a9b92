package dryrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
)

// Current reads the current document id of alias and its version; Found is
// false when there is none.
type Current func(ctx context.Context, alias, id string) (*CurrentDoc, error)

// FromEngine reads the current document the way the search consumer does:
// an _mget of the alias, the source decoded with projections.Decode.
func FromEngine(eng indexer.Engine) Current {
	return func(ctx context.Context, alias, id string) (*CurrentDoc, error) {
		docs, err := eng.MGet(ctx, alias, []string{id})
		if err != nil {
			return nil, err
		}
		cur := &CurrentDoc{From: "index " + alias}
		d, ok := docs[id]
		if !ok {
			return cur, nil
		}
		m, err := projections.Decode(d.Source)
		if err != nil {
			return nil, fmt.Errorf("current document %s/%s is not a JSON object: %w", alias, id, err)
		}
		cur.Found, cur.Doc, cur.Version = true, m, d.Version
		return cur, nil
	}
}

// Given is a current document given by hand (from says where from, e.g.
// "file doc.json"), the same for every alias and id.
func Given(doc map[string]any, version int64, from string) Current {
	return func(context.Context, string, string) (*CurrentDoc, error) {
		return &CurrentDoc{From: from, Found: true, Doc: doc, Version: version}, nil
	}
}

// ParseCurrent reads a current document: either the document itself (a
// JSON object) or the engine's answer to GET <alias>/_doc/<id>, whose
// _source is the document and _version its version (a "found": false
// answer is no document: doc nil). version is 0 for a bare document.
func ParseCurrent(data []byte) (doc map[string]any, version int64, err error) {
	m, err := projections.Decode(bytes.TrimSpace(data))
	if err != nil {
		return nil, 0, fmt.Errorf("not a JSON object: %w", err)
	}
	src, hasSource := m["_source"]
	if found, ok := m["found"].(bool); ok && !found && !hasSource {
		return nil, 0, nil
	}
	if !hasSource {
		return m, 0, nil
	}
	doc, ok := src.(map[string]any)
	if !ok {
		return nil, 0, errors.New("_source is not a JSON object")
	}
	if v, ok := m["_version"]; ok {
		n, isNum := v.(json.Number)
		if version, err = n.Int64(); !isNum || err != nil || version < 0 {
			return nil, 0, fmt.Errorf("_version %v is not an integer >= 0", v)
		}
	}
	return doc, version, nil
}
