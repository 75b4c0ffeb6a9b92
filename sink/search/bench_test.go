package search_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/search"
)

const benchBatch = 500

// timedEngine sums the time spent in _bulk requests.
type timedEngine struct {
	indexer.Engine
	bulk atomic.Int64 // ns
}

func (t *timedEngine) Bulk(ctx context.Context, ops []indexer.BulkOp) ([]indexer.BulkResult, error) {
	start := time.Now()
	res, err := t.Engine.Bulk(ctx, ops)
	t.bulk.Add(int64(time.Since(start)))
	return res, err
}

// timed wraps a consumer and sums the time spent in Deliver and in the
// engine's bulk requests.
type timed struct {
	*search.Consumer
	deliver atomic.Int64 // ns
}

func (t *timed) Deliver(ctx context.Context, evs []*outbox.Event) []delivery.Outcome {
	start := time.Now()
	out := t.Consumer.Deliver(ctx, evs)
	t.deliver.Add(int64(time.Since(start)))
	return out
}

// produceMany writes events with the producer API, 1000 per transaction,
// and returns them as stored.
func (b *bundle) produceMany(evs []outbox.Event) []*outbox.Event {
	var out []*outbox.Event
	for start := 0; start < len(evs); start += 1000 {
		out = append(out, b.produce(evs[start:min(start+1000, len(evs))]...)...)
	}
	return out
}

// waitPending waits until no event is pending and returns when that was seen.
func (b *bundle) waitPending(timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var pending bool
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT FROM aa_outbox_event WHERE status = 'pending')`).Scan(&pending); err != nil {
			b.t.Fatal(err)
		}
		if !pending {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("events still pending after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkEndToEnd measures events/s from the outbox to searchable
// documents (relay → search consumer → OpenSearch, batch 500) and divides it
// by the raw _bulk rate of the same documents (same ids, versions, batch
// size) sent straight to a fresh index of the same definition in the same
// run, with as many _bulk requests in flight as there are relays (the
// consumer's writer is limited to the same number). Target: ratio
// >= 0.8. relays=1 is one relay process; relays=2 is two relays sharing the
// partitions (a supported deployment), whose claims and acks overlap each
// other's deliveries.
//
//	go test -run '^$' -bench EndToEnd -benchtime 1x ./sink/search/
func BenchmarkEndToEnd(b *testing.B) {
	for _, relays := range []int{1, 2} {
		b.Run(fmt.Sprintf("relays=%d", relays), func(b *testing.B) { benchEndToEnd(b, relays) })
	}
}

func benchEndToEnd(b *testing.B, relays int) {
	const n = 20000
	for range b.N {
		bd := setup(b)
		evs := make([]outbox.Event, n)
		for i := range evs {
			evs[i] = customer.Created(ch(uuid.New(), int64(1+i%7), map[string]any{"status": "active",
				"display_name": fmt.Sprintf("Customer %d", i), "email": fmt.Sprintf("c%d@example.org", i),
				"credit_limit": i * 10, "address": map[string]any{"city": "Berlin", "country": "DE"}}))
		}
		stored := bd.produceMany(evs)

		// Raw: the documents the consumer writes, straight to a fresh index.
		ops := make([]indexer.BulkOp, 0, n)
		for _, e := range stored {
			r, err := bd.set.Project(e, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			r.Doc["deleted"] = false
			doc, _ := json.Marshal(r.Doc)
			ops = append(ops, indexer.BulkOp{Type: indexer.OpIndex, ID: r.ID, Version: r.Version, Doc: doc, Compact: true})
		}
		// The raw rate is measured before and after the end-to-end run (the
		// engine warms up, the machine's load drifts) and averaged.
		var rawCPU testenv.CPU
		var rawWork indexWork
		rawRate := func() indexer.BulkRate {
			raw := testenv.Name(bd.alias + "_raw")
			c0 := testenv.ReadCPU()
			defer func() { rawCPU = testenv.ReadCPU().Sub(c0) }()
			if err := mapping.CreatePhysical(bd.ctx, bd.eng, bd.def, raw, false); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { bd.eng.DeleteIndex(bd.ctx, raw) })
			rate, err := indexer.RawBulkRateConcurrent(bd.ctx, bd.eng, raw, ops, benchBatch, relays)
			if err != nil {
				b.Fatal(err)
			}
			rawWork = bd.indexWork(raw)
			return rate
		}
		raw1 := rawRate()
		raw1CPU, raw1Work := rawCPU, rawWork
		b.ResetTimer()

		c0 := testenv.ReadCPU()
		start := time.Now()
		te := &timedEngine{Engine: bd.eng}
		// As many _bulk requests in flight as the raw side sends: the
		// relay delivers two batches at once (relay.in_flight), so the
		// consumer's projection of one overlaps the other's _bulk, but the
		// writer lets only `relays` requests reach the engine at a time.
		tc := &timed{Consumer: bd.consumer(func(c *search.Config) {
			c.Engine = te
			c.Writer = indexer.NewWriter(te, indexer.WriterConfig{Concurrency: relays})
		})}
		var rs []*relay.Relay
		for range relays {
			rs = append(rs, bd.startRelay(tc, benchBatch))
		}
		// Like the raw side: everything written, then one refresh (polling
		// with refreshes would slow the engine down).
		bd.waitPending(5 * time.Minute)
		if got := bd.searchable(bd.alias, ""); got != n {
			b.Fatalf("%d documents searchable, want %d", got, n)
		}
		e2e := time.Since(start)
		e2eCPU := testenv.ReadCPU().Sub(c0)
		b.StopTimer()
		raw2 := rawRate()

		rawPerSec := (raw1.PerSecond + raw2.PerSecond) / 2
		e2eRate := float64(n) / e2e.Seconds()
		b.ReportMetric(e2eRate, "e2e_events/s")
		b.ReportMetric(rawPerSec, "raw_docs/s")
		b.ReportMetric(e2eRate/rawPerSec, "ratio")
		var batches uint64
		var claim, deliver, ack time.Duration
		for _, r := range rs {
			st := r.Stats()
			batches += st.Batches
			claim, deliver, ack = claim+st.ClaimTime, deliver+st.DeliverTime, ack+st.AckTime
		}
		b.Logf("relays=%d: end to end: %d events in %s = %.0f events/s; raw _bulk before: %s; after: %s; ratio %.2f",
			relays, n, e2e.Round(time.Millisecond), e2eRate, raw1, raw2, e2eRate/rawPerSec)
		b.Logf("relays=%d: %d batches; summed over relays: claim %s, deliver %s (consumer %s, of which _bulk %s), ack %s; writer %+v",
			relays, batches, claim.Round(time.Millisecond), deliver.Round(time.Millisecond),
			time.Duration(tc.deliver.Load()).Round(time.Millisecond), time.Duration(te.bulk.Load()).Round(time.Millisecond),
			ack.Round(time.Millisecond), tc.Writer().Stats())
		b.Logf("relays=%d: raw before: %s; %s", relays, raw1CPU, raw1Work)
		b.Logf("relays=%d: end to end: %s; %s", relays, e2eCPU, bd.indexWork(bd.alias))
		b.Logf("relays=%d: raw after: %s; %s", relays, rawCPU, rawWork)
	}
}

// BenchmarkCoalescing measures a bursty workload — 100 customers, each
// updated 50 times in a row (partial payloads) — through the relay with and
// without coalescing.
//
//	go test -run '^$' -bench Coalescing -benchtime 1x ./sink/search/
func BenchmarkCoalescing(b *testing.B) {
	const aggs, burst = 100, 50
	for _, coalesce := range []bool{true, false} {
		b.Run(fmt.Sprintf("coalesce=%v", coalesce), func(b *testing.B) {
			for range b.N {
				bd := setup(b)
				var evs []outbox.Event
				for range aggs {
					id := uuid.New()
					evs = append(evs, customer.Created(ch(id, 1, map[string]any{"status": "active", "email": "x@example.org"})))
					for v := int64(2); v <= burst; v++ {
						evs = append(evs, customer.Updated(ch(id, v, map[string]any{"credit_limit": v})))
					}
				}
				bd.produceMany(evs)
				cons := bd.consumer(func(c *search.Config) { c.DisableCoalescing = !coalesce })
				b.ResetTimer()
				start := time.Now()
				bd.startRelay(cons, benchBatch)
				bd.waitPending(5 * time.Minute)
				el := time.Since(start)
				b.StopTimer()
				if err := bd.eng.Refresh(bd.ctx, bd.alias); err != nil {
					b.Fatal(err)
				}
				if n := bd.searchable(bd.alias, fmt.Sprintf(`{"term":{"credit_limit":%d}}`, burst)); n != aggs {
					b.Fatalf("%d documents at their final version, want %d", n, aggs)
				}
				st := cons.Stats()
				rate := float64(len(evs)) / el.Seconds()
				b.ReportMetric(rate, "events/s")
				b.ReportMetric(float64(len(evs))/float64(max(st.Writes, 1)), "events/write")
				b.Logf("coalesce=%v: %d events in %s = %.0f events/s, %d document writes, %d events coalesced, %d _mget",
					coalesce, len(evs), el.Round(time.Millisecond), rate, st.Writes, st.Coalesced, st.MGets)
			}
		})
	}
}

// indexWork is what the engine reports it spent on one index (its _stats):
// the time in indexing, refreshes and merges, and how many of each.
type indexWork struct {
	Indexing, Refresh, Merge time.Duration
	Refreshes, Merges        int64
}

func (w indexWork) String() string {
	return fmt.Sprintf("engine work on the index: indexing %s, %d refreshes %s, %d merges %s",
		w.Indexing, w.Refreshes, w.Refresh, w.Merges, w.Merge)
}

// since is the work done since was.
func (w indexWork) since(was indexWork) indexWork {
	return indexWork{Indexing: w.Indexing - was.Indexing, Refresh: w.Refresh - was.Refresh, Merge: w.Merge - was.Merge,
		Refreshes: w.Refreshes - was.Refreshes, Merges: w.Merges - was.Merges}
}

func (b *bundle) indexWork(index string) indexWork {
	b.t.Helper()
	resp, err := http.Get(testenv.EngineURL(b.t) + "/" + index + "/_stats/indexing,refresh,merge")
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		All struct {
			Primaries struct {
				Indexing struct {
					IndexTime int64 `json:"index_time_in_millis"`
				} `json:"indexing"`
				Refresh struct {
					Total     int64 `json:"total"`
					TotalTime int64 `json:"total_time_in_millis"`
				} `json:"refresh"`
				Merges struct {
					Total     int64 `json:"total"`
					TotalTime int64 `json:"total_time_in_millis"`
				} `json:"merges"`
			} `json:"primaries"`
		} `json:"_all"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		b.t.Fatalf("_stats of %s: %v", index, err)
	}
	p := st.All.Primaries
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	return indexWork{Indexing: ms(p.Indexing.IndexTime), Refresh: ms(p.Refresh.TotalTime), Merge: ms(p.Merges.TotalTime),
		Refreshes: p.Refresh.Total, Merges: p.Merges.Total}
}
