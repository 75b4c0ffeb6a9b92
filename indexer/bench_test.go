package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
)

// benchDocs returns n customer-like documents with ids and versions.
func benchDocs(n int) []indexer.BulkOp {
	ops := make([]indexer.BulkOp, n)
	for i := range ops {
		doc, _ := json.Marshal(map[string]any{
			"name": fmt.Sprintf("Customer %d", i), "age": 20 + i%60,
			"email": fmt.Sprintf("c%d@example.com", i), "city": "Zürich", "version": 1,
		})
		ops[i] = indexer.BulkOp{Type: indexer.OpIndex, ID: fmt.Sprintf("cust-%08d", i), Version: 1, Doc: doc}
	}
	return ops
}

const benchN, benchBatch = 10000, 500

// BenchmarkRawBulk is the engine's own _bulk rate for 10,000 documents in
// requests of 500 (the denominator of the end-to-end benchmark):
//
//	go test ./indexer -run '^$' -bench RawBulk -benchtime 3x
func BenchmarkRawBulk(b *testing.B) {
	eng := newOpenSearch(b, testenv.EngineURL(b))
	ops := benchDocs(benchN)
	for _, conc := range []int{1, 2} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			var total float64
			for b.Loop() {
				b.StopTimer()
				idx := benchIndex(b, eng)
				b.StartTimer()
				r, err := indexer.RawBulkRateConcurrent(context.Background(), eng, idx, ops, benchBatch, conc)
				if err != nil {
					b.Fatal(err)
				}
				total += r.PerSecond
			}
			b.ReportMetric(total/float64(b.N), "docs/s")
		})
	}
}

// BenchmarkWriter sends the same documents through Writer.Write (batch 500,
// concurrency 2) to show the writer's own overhead against BenchmarkRawBulk.
func BenchmarkWriter(b *testing.B) {
	eng := newOpenSearch(b, testenv.EngineURL(b))
	ops := benchDocs(benchN)
	var docs int
	for b.Loop() {
		b.StopTimer()
		idx := benchIndex(b, eng)
		for i := range ops {
			ops[i].Index = idx
		}
		w := indexer.NewWriter(eng, indexer.WriterConfig{FlushCount: benchBatch, Concurrency: 2})
		b.StartTimer()
		for _, o := range w.Write(context.Background(), ops) {
			if o.Kind != delivery.OK {
				b.Fatalf("%+v", o)
			}
		}
		if err := eng.Refresh(context.Background(), idx); err != nil {
			b.Fatal(err)
		}
		docs += len(ops)
	}
	b.ReportMetric(float64(docs)/b.Elapsed().Seconds(), "docs/s")
}

func benchIndex(b *testing.B, eng indexer.Engine) string {
	name := testenv.Name("bench")
	if err := eng.CreateIndex(context.Background(), name, json.RawMessage(testDefinition)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.DeleteIndex(context.Background(), name) })
	return name
}
