package indexer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/bytedance/sonic"
)

// This file holds the wire format that Elasticsearch 8 and OpenSearch 2
// share: request bodies are built and answers decoded here, so both adapters
// only differ in the client that carries the bytes.

// answers decodes the answers read per batch (_bulk, _mget) into their
// structs: sonic (already the consumer's JSON library) takes a third of the
// CPU encoding/json did on a bulk answer of 2,000 items
// (BenchmarkDecodeBulkAnswer). ConfigStd copies strings out of the body and
// validates them as encoding/json does.
var answers = sonic.ConfigStd

// encodeBulk writes the NDJSON body of a _bulk request. Every op carries its
// version with version_type=external. A document that is not valid JSON is
// an error naming the op (the caller reports it as poison for that op only;
// see Writer).
func encodeBulk(buf *bytes.Buffer, ops []BulkOp) error {
	for i := range ops {
		if err := appendOp(buf, &ops[i]); err != nil {
			return err
		}
	}
	return nil
}

// appendOp appends one op (action line and, for index, the document line).
// On error buf is left as it was.
func appendOp(buf *bytes.Buffer, op *BulkOp) error {
	mark := buf.Len()
	switch op.Type {
	case OpIndex, OpDelete:
	default:
		return fmt.Errorf("bulk op %s/%s: unknown op type %q", op.Index, op.ID, op.Type)
	}
	if op.Index == "" || op.ID == "" {
		return fmt.Errorf("bulk op %q %s/%s: index and id are required", op.Type, op.Index, op.ID)
	}
	if op.Version < 0 {
		return fmt.Errorf("bulk op %s %s/%s: negative version %d", op.Type, op.Index, op.ID, op.Version)
	}
	buf.WriteString(`{"`)
	if op.Guarded && op.Create && op.Type == OpIndex {
		buf.WriteString("create")
	} else {
		buf.WriteString(string(op.Type))
	}
	buf.WriteString(`":{"_index":`)
	writeJSONString(buf, op.Index)
	buf.WriteString(`,"_id":`)
	writeJSONString(buf, op.ID)
	switch {
	case op.Guarded && op.Create:
	case op.Guarded:
		buf.WriteString(`,"if_seq_no":`)
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), op.IfSeqNo, 10))
		buf.WriteString(`,"if_primary_term":`)
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), op.IfPrimaryTerm, 10))
	default:
		buf.WriteString(`,"version":`)
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), op.Version, 10))
		if op.SameVersion {
			buf.WriteString(`,"version_type":"external_gte"`)
		} else {
			buf.WriteString(`,"version_type":"external"`)
		}
	}
	if op.Routing != "" {
		buf.WriteString(`,"routing":`)
		writeJSONString(buf, op.Routing)
	}
	if op.RequireAlias && op.Type == OpIndex {
		buf.WriteString(`,"require_alias":true`)
	}
	buf.WriteString("}}\n")
	if op.Type == OpIndex && op.Compact {
		buf.Write(op.Doc)
		buf.WriteByte('\n')
	} else if op.Type == OpIndex {
		// NDJSON: the document must be one line; Compact also validates it.
		if err := json.Compact(buf, op.Doc); err != nil {
			buf.Truncate(mark)
			return fmt.Errorf("bulk op index %s/%s: document is not valid JSON: %w", op.Index, op.ID, err)
		}
		buf.WriteByte('\n')
	}
	return nil
}

// writeJSONString writes s as json.Marshal does. Index names and ids are
// mostly plain ASCII, written as they are (two per op, which json.Marshal
// would allocate for).
func writeJSONString(buf *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			buf.Write(b)
			return
		}
	}
	buf.WriteByte('"')
	buf.WriteString(s)
	buf.WriteByte('"')
}

// errorBody is the error object of an engine answer or of a bulk item.
type errorBody struct {
	Type     string     `json:"type"`
	Reason   string     `json:"reason"`
	CausedBy *errorBody `json:"caused_by"`
}

// text is "reason (caused by type: reason …)".
func (e *errorBody) text() string {
	if e == nil {
		return ""
	}
	s := e.Reason
	for c := e.CausedBy; c != nil; c = c.CausedBy {
		s += " (caused by " + c.Type + ": " + c.Reason + ")"
	}
	return s
}

// engineError decodes an error answer: {"error":{…},"status":N},
// {"error":"text","status":N}, or anything else (the body is quoted).
func engineError(op string, status int, body []byte) *EngineError {
	ee := &EngineError{Op: op, Status: status}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 {
		var eb errorBody
		var s string
		switch {
		case json.Unmarshal(env.Error, &eb) == nil && (eb.Type != "" || eb.Reason != ""):
			ee.Type, ee.Reason = eb.Type, eb.text()
			return ee
		case json.Unmarshal(env.Error, &s) == nil:
			ee.Reason = s
			return ee
		}
	}
	ee.Reason = strings.TrimSpace(string(body))
	if len(ee.Reason) > 500 {
		ee.Reason = ee.Reason[:500] + "…"
	}
	if ee.Reason == "" {
		ee.Reason = http.StatusText(status)
	}
	return ee
}

// decodeBulk reads every item of a _bulk answer; n is the number of ops sent.
// bulkFilterPath keeps of a bulk answer what decodeBulk reads (every item
// keeps its status, so none drops out): the engine serializes, and we parse,
// a third of the full answer.
var bulkFilterPath = []string{"items.*.status", "items.*._version", "items.*.result", "items.*.error"}

func decodeBulk(n int, body []byte) ([]BulkResult, error) {
	type result struct {
		Status  int        `json:"status"`
		Version int64      `json:"_version"`
		SeqNo   int64      `json:"_seq_no"`
		Term    int64      `json:"_primary_term"`
		Result  string     `json:"result"`
		Error   *errorBody `json:"error"`
	}
	// Each item has one key, its action; named fields instead of a map
	// per item keep decoding cheap.
	var resp struct {
		Items []struct {
			Index  *result `json:"index"`
			Delete *result `json:"delete"`
			Create *result `json:"create"`
			Update *result `json:"update"`
		} `json:"items"`
	}
	if err := answers.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("decode bulk answer: %w", err)
	}
	if len(resp.Items) != n {
		return nil, fmt.Errorf("decode bulk answer: %d items for %d ops", len(resp.Items), n)
	}
	out := make([]BulkResult, n)
	for i, item := range resp.Items {
		it := cmp.Or(item.Index, item.Delete, item.Create, item.Update)
		if it == nil {
			return nil, fmt.Errorf("decode bulk answer: item %d has no index, delete, create or update result", i)
		}
		out[i] = BulkResult{Status: it.Status, Version: it.Version, Result: it.Result, SeqNo: it.SeqNo, PrimaryTerm: it.Term}
		if it.Error != nil {
			out[i].ErrType, out[i].ErrReason = it.Error.Type, it.Error.text()
		}
	}
	return out, nil
}

func encodeIDs(ids []string) []byte {
	b, _ := json.Marshal(map[string][]string{"ids": ids})
	return b
}

func decodeMGet(index string, body []byte) (map[string]Doc, error) {
	var resp struct {
		Docs []struct {
			ID      string          `json:"_id"`
			Found   bool            `json:"found"`
			Version int64           `json:"_version"`
			SeqNo   int64           `json:"_seq_no"`
			Term    int64           `json:"_primary_term"`
			Source  json.RawMessage `json:"_source"`
			Error   *errorBody      `json:"error"`
		} `json:"docs"`
	}
	if err := answers.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("decode mget answer of %s: %w", index, err)
	}
	out := make(map[string]Doc, len(resp.Docs))
	for _, d := range resp.Docs {
		if d.Error != nil {
			// Per-document errors carry no status; a missing index is the
			// common one.
			status := http.StatusInternalServerError
			if d.Error.Type == "index_not_found_exception" {
				status = http.StatusNotFound
			}
			return nil, &EngineError{Op: "mget " + index + " id " + d.ID, Status: status, Type: d.Error.Type, Reason: d.Error.text()}
		}
		if d.Found {
			out[d.ID] = Doc{Source: d.Source, Version: d.Version, SeqNo: d.SeqNo, PrimaryTerm: d.Term}
		}
	}
	return out, nil
}

func decodeGetIndex(name string, body []byte) (*IndexInfo, error) {
	var resp map[string]struct {
		Aliases  map[string]json.RawMessage `json:"aliases"`
		Mappings json.RawMessage            `json:"mappings"`
		Settings json.RawMessage            `json:"settings"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("decode index %s: %w", name, err)
	}
	if len(resp) != 1 {
		return nil, fmt.Errorf("get index %s: expected one physical index, got %d", name, len(resp))
	}
	for physical, v := range resp {
		info := &IndexInfo{Name: physical, Settings: v.Settings, Mappings: v.Mappings}
		for a := range v.Aliases {
			info.Aliases = append(info.Aliases, a)
		}
		slices.Sort(info.Aliases)
		return info, nil
	}
	return nil, nil
}

func decodeAliasTargets(alias string, body []byte) ([]string, error) {
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("decode alias %s: %w", alias, err)
	}
	out := make([]string, 0, len(resp))
	for idx := range resp {
		out = append(out, idx)
	}
	slices.Sort(out)
	return out, nil
}

func encodeAliases(actions []AliasAction) ([]byte, error) {
	type body struct {
		Index        string          `json:"index"`
		Alias        string          `json:"alias,omitempty"`
		Filter       json.RawMessage `json:"filter,omitempty"`
		IsWriteIndex *bool           `json:"is_write_index,omitempty"`
	}
	list := make([]map[string]body, 0, len(actions))
	for _, a := range actions {
		switch {
		case a.RemoveIndex:
			list = append(list, map[string]body{"remove_index": {Index: a.Index}})
		case a.Add:
			list = append(list, map[string]body{"add": {Index: a.Index, Alias: a.Alias, Filter: a.Filter, IsWriteIndex: a.IsWriteIdx}})
		default:
			list = append(list, map[string]body{"remove": {Index: a.Index, Alias: a.Alias}})
		}
	}
	return json.Marshal(map[string]any{"actions": list})
}

func decodeSearch(index string, body []byte) (*SearchResult, error) {
	var resp struct {
		Hits struct {
			Total struct {
				Value int64 `json:"value"`
			} `json:"total"`
			Hits []struct {
				Index   string          `json:"_index"`
				ID      string          `json:"_id"`
				Version int64           `json:"_version"`
				Source  json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("decode search answer of %s: %w", index, err)
	}
	out := &SearchResult{Total: resp.Hits.Total.Value, Hits: make([]Hit, len(resp.Hits.Hits))}
	for i, h := range resp.Hits.Hits {
		out.Hits[i] = Hit{Index: h.Index, ID: h.ID, Version: h.Version, Source: h.Source}
	}
	return out, nil
}

func decodeCount(index string, body []byte) (int64, error) {
	var resp struct {
		Count int64 `json:"count"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return 0, fmt.Errorf("decode count answer of %s: %w", index, err)
	}
	return resp.Count, nil
}

// bodyReader returns a reader for an optional JSON body (nil when empty).
func bodyReader(b []byte) io.Reader {
	if len(b) == 0 {
		return nil
	}
	return bytes.NewReader(b)
}

// decodeWriteBlocks reads the blocks of a cluster state answer
// ({"blocks":{"global":{id:block},"indices":{name:{id:block}}}}) and keeps
// the write-level ones that apply to indexes (global ones always).
func decodeWriteBlocks(body []byte, indexes []string) ([]Block, error) {
	type block struct {
		Description string   `json:"description"`
		Levels      []string `json:"levels"`
	}
	var resp struct {
		Blocks struct {
			Global  map[string]block            `json:"global"`
			Indices map[string]map[string]block `json:"indices"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("decode cluster blocks: %w", err)
	}
	out := []Block{}
	add := func(index string, m map[string]block) {
		ids := slices.Sorted(maps.Keys(m))
		for _, id := range ids {
			if b := m[id]; slices.Contains(b.Levels, "write") {
				out = append(out, Block{Index: index, ID: id, Description: b.Description})
			}
		}
	}
	add("", resp.Blocks.Global)
	for _, ix := range indexes {
		add(ix, resp.Blocks.Indices[ix])
	}
	return out, nil
}
