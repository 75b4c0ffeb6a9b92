package search_test

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// BenchmarkConsumerRealistic is the search consumer alone on the realistic
// workload (partial updates, hot customers, deletes, three tenants): the
// 40,000 events in id order, in batches of 2,000 as the relay hands them,
// to the real engine. It reports this process's CPU per event — decoding,
// projecting, the _mget of states the cache does not hold, folding,
// encoding, the HTTP requests — which is the consumer's share of
// searchsync's CPU per event; the relay's share is
// BenchmarkDrainHotAggregates' relay_µs/event. Batches go one after the
// other, so events/s is not a pipeline's rate:
//
//	go test ./sink/search -run '^$' -bench ConsumerRealistic -benchtime 1x -count 3
func BenchmarkConsumerRealistic(b *testing.B) {
	consumerRealistic(b, nil)
}

// consumerRealistic is BenchmarkConsumerRealistic with the projections of
// set (the bundle's when set is nil or returns nil).
func consumerRealistic(b *testing.B, set func(bd *bundle) *projections.Set) {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		was := debug.SetGCPercent(400) // the binary's default (cmd/searchsync)
		b.Cleanup(func() { debug.SetGCPercent(was) })
	}
	const batch = 2000
	for range b.N {
		bd := setup(b)
		var mod func(c *search.Config)
		if set != nil {
			if s := set(bd); s != nil {
				mod = func(c *search.Config) { c.Projections = s }
			}
		}
		cons := bd.consumer(mod)
		if _, err := cons.EnsureIndexes(bd.ctx); err != nil {
			b.Fatal(err)
		}
		evs := loadgen.Realistic().Make()
		mem := make([]*outbox.Event, len(evs))
		for i := range evs {
			e := evs[i]
			e.ID, e.SchemaVersion = int64(i+1), max(e.SchemaVersion, 1)
			mem[i] = &e
		}
		runtime.GC()
		b.ResetTimer()
		c0, t0 := testenv.ReadCPU(), time.Now()
		for i := 0; i < len(mem); i += batch {
			part := mem[i:min(i+batch, len(mem))]
			for k, o := range cons.Deliver(bd.ctx, part) {
				if !o.Kind.Delivered() {
					b.Fatalf("event %d: %v %s", part[k].ID, o.Kind, o.Reason)
				}
			}
		}
		took, cpu := time.Since(t0), testenv.ReadCPU().Sub(c0)
		b.StopTimer()
		n := float64(len(mem))
		b.ReportMetric(float64(cpu.Self.Microseconds())/n, "consumer_µs/event")
		b.ReportMetric(float64(cpu.Engine.Microseconds())/n, "engine_µs/event")
		b.ReportMetric(n/took.Seconds(), "events/s")
		st := cons.Stats()
		b.Logf("%d events in %s; %s; %+v", len(mem), took.Round(time.Millisecond), cpu, st)
	}
}
