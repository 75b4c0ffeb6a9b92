package indexer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestAppendOpCopiesCompactDocsAndCompactsOthers(t *testing.T) {
	var buf bytes.Buffer
	ops := []BulkOp{
		{Type: OpIndex, Index: "i", ID: "1", Version: 3, Doc: []byte(`{"a":1}`), Compact: true},
		{Type: OpIndex, Index: "i", ID: "2", Version: 4, Doc: []byte("{\n  \"b\": [1, 2]\n}")},
		{Type: OpDelete, Index: "i", ID: "3", Version: 5},
	}
	if err := encodeBulk(&buf, ops); err != nil {
		t.Fatal(err)
	}
	want := `{"index":{"_index":"i","_id":"1","version":3,"version_type":"external"}}
{"a":1}
{"index":{"_index":"i","_id":"2","version":4,"version_type":"external"}}
{"b":[1,2]}
{"delete":{"_index":"i","_id":"3","version":5,"version_type":"external"}}
`
	if got := buf.String(); got != want {
		t.Errorf("NDJSON:\n%s\nwant:\n%s", got, want)
	}

	// A document not marked compact is checked; the buffer stays as it was.
	before := buf.Len()
	err := appendOp(&buf, &BulkOp{Type: OpIndex, Index: "i", ID: "4", Doc: []byte(`{"a":`)})
	if err == nil || !strings.Contains(err.Error(), "i/4: document is not valid JSON") {
		t.Errorf("invalid document: %v", err)
	}
	if buf.Len() != before {
		t.Error("a rejected op left bytes in the request")
	}
}

func TestDecodeBulkReadsEveryItem(t *testing.T) {
	body := []byte(`{"took":3,"errors":true,"items":[
	 {"index":{"_index":"i","_id":"1","_version":3,"result":"created","status":201}},
	 {"delete":{"_index":"i","_id":"2","_version":7,"result":"deleted","status":200}},
	 {"index":{"_index":"i","_id":"3","status":409,"error":{"type":"version_conflict_engine_exception","reason":"[3]: version conflict"}}},
	 {"create":{"_index":"i","_id":"4","status":429,"error":{"type":"es_rejected_execution_exception","reason":"rejected"}}}]}`)
	res, err := decodeBulk(4, body)
	if err != nil {
		t.Fatal(err)
	}
	want := []BulkResult{
		{Status: 201, Version: 3, Result: "created"},
		{Status: 200, Version: 7, Result: "deleted"},
		{Status: 409, ErrType: "version_conflict_engine_exception"},
		{Status: 429, ErrType: "es_rejected_execution_exception"},
	}
	for i, w := range want {
		g := res[i]
		if g.Status != w.Status || g.Version != w.Version || g.Result != w.Result || g.ErrType != w.ErrType {
			t.Errorf("item %d: %+v, want %+v", i, g, w)
		}
		if w.ErrType != "" && g.ErrReason == "" {
			t.Errorf("item %d: no reason", i)
		}
	}
	if _, err := decodeBulk(5, body); err == nil || !strings.Contains(err.Error(), "4 items for 5 ops") {
		t.Errorf("count mismatch: %v", err)
	}
	if _, err := decodeBulk(1, []byte(`{"items":[{"upsert":{"status":200}}]}`)); err == nil || !strings.Contains(err.Error(), "item 0") {
		t.Errorf("unknown action: %v", err)
	}
}

// Index names, ids and routings are quoted as json.Marshal quotes them,
// whether they are plain ASCII (written as they are) or not.
func TestAppendOpQuotesLikeJSONMarshal(t *testing.T) {
	for _, s := range []string{"plain-id_1", "", "with \"quote\"", `back\slash`, "<b>&amp;", "tab\there", "new\nline",
		"\x7f del", "Zürich", "日本", "bad \xff utf8", "\u2028 sep"} {
		var buf bytes.Buffer
		writeJSONString(&buf, s)
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if buf.String() != string(want) {
			t.Errorf("%q: wrote %s, want %s", s, buf.String(), want)
		}
	}
}

// The _mget answer: found documents with their source as it came, missing
// ones left out, a per-document error as an EngineError.
func TestDecodeMGetKeepsSourcesAsTheyCame(t *testing.T) {
	body := []byte(`{"docs":[
	 {"_index":"i","_id":"a","_version":4,"found":true,"_source":{"n": 1.50, "s":"x\u00e9","o":{"k":[1,2]}}},
	 {"_index":"i","_id":"b","found":false}]}`)
	docs, err := decodeMGet("i", body)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 || docs["a"].Version != 4 || string(docs["a"].Source) != `{"n": 1.50, "s":"x\u00e9","o":{"k":[1,2]}}` {
		t.Fatalf("docs %+v (source %s)", docs, docs["a"].Source)
	}
	_, err = decodeMGet("i", []byte(`{"docs":[{"_index":"i","_id":"c","error":{"type":"index_not_found_exception","reason":"no such index [i]"}}]}`))
	var ee *EngineError
	if !errors.As(err, &ee) || ee.Status != 404 || !strings.Contains(ee.Error(), "no such index") {
		t.Fatalf("error: %v", err)
	}
	if _, err := decodeMGet("i", []byte(`{"docs":[{"_id":`)); err == nil || !strings.Contains(err.Error(), "decode mget answer of i") {
		t.Fatalf("truncated answer: %v", err)
	}
}

// BenchmarkDecodeBulkAnswer: the answer to a _bulk of 2,000 index ops, as
// filter_path leaves it.
//
//	go test ./indexer -run '^$' -bench DecodeBulkAnswer
func BenchmarkDecodeBulkAnswer(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"items":[`)
	for i := range 2000 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"index":{"_version":%d,"result":"updated","status":200}}`, i+1)
	}
	body.WriteString(`]}`)
	b.SetBytes(int64(body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeBulk(2000, body.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
}
