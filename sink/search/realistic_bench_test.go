package search_test

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/search"
)

// BenchmarkEndToEndRealistic measures one relay in its default
// configuration on the workload users have, and divides its rate by the
// engine's own _bulk of one document per event in the same run:
//
//   - realistic: 40,000 customer events over 2,000 customers in three
//     tenants, mostly partial updates in the spec's payload shape (each
//     read back with _mget and merged), 80 % of them on 200 hot customers,
//     3 % deletes (loadgen.Realistic);
//   - bursty: the same, each update a run of 20 updates of one customer
//     (coalescing folds them into one write per batch).
//
// The raw side writes the full document after each event (index, external
// version, the consumer's soft-delete tombstones), batch 500, two requests
// in flight, to a fresh index of the same definition, before and after the
// end-to-end run. pin=on gives the engine CPU 1 alone and PostgreSQL and
// searchsync CPU 0 (testenv.Pin: the production-like layout, the engine on
// hosts of its own); pin=off lets the scheduler place everything. Printed:
// the ratio, each side's rate, CPU per event of searchsync (this process:
// relay and consumer; gc_µs/event the garbage collector's part of it),
// PostgreSQL and the engine, and the machine's busy share (pinned, each
// core's too: core0 is PostgreSQL's and searchsync's, core1 the
// engine's). The process runs with the binary's GC percent (400) unless
// GOGC is set. SEARCHSYNC_BENCH_CONSUMER=none delivers to a consumer that
// answers every event at once instead: the relay's and PostgreSQL's
// ceiling (pinned, what CPU 0 can deliver whatever the consumer costs).
//
//	go test ./sink/search -run '^$' -bench 'EndToEndRealistic' -benchtime 1x -count 3
func BenchmarkEndToEndRealistic(b *testing.B) {
	bursty := loadgen.Realistic()
	bursty.Burst = 20
	for _, wl := range []struct {
		name string
		w    loadgen.Workload
	}{{"realistic", loadgen.Realistic()}, {"bursty", bursty}} {
		for _, pin := range []bool{false, true} {
			name := "workload=" + wl.name + "/pin=off"
			if pin {
				name = "workload=" + wl.name + "/pin=on"
			}
			b.Run(name, func(b *testing.B) { benchRealistic(b, wl.w, pin) })
		}
	}
}

func benchRealistic(b *testing.B, w loadgen.Workload, pin bool) {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		// The binary's default (cmd/searchsync, defaultGCPercent), unless
		// GOGC says otherwise.
		was := debug.SetGCPercent(400)
		b.Cleanup(func() { debug.SetGCPercent(was) })
	}
	for range b.N {
		bd := setup(b)
		evs := w.Make()
		n := len(evs)
		mem := make([]*outbox.Event, n) // as the outbox will hold them
		for i := range evs {
			e := evs[i]
			e.ID, e.SchemaVersion = int64(i+1), max(e.SchemaVersion, 1)
			mem[i] = &e
		}
		ops, live := rawDocs(b, bd, mem)

		rawRate := func() (indexer.BulkRate, testenv.CPU) {
			raw := testenv.Name(bd.alias + "_raw")
			if err := mapping.CreatePhysical(bd.ctx, bd.eng, bd.def, raw, false); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { bd.eng.DeleteIndex(bd.ctx, raw) })
			c0 := testenv.ReadCPU()
			rate, err := indexer.RawBulkRateConcurrent(bd.ctx, bd.eng, raw, ops, benchBatch, 2)
			if err != nil {
				b.Fatal(err)
			}
			return rate, testenv.ReadCPU().Sub(c0)
		}
		if pin {
			restore, err := testenv.Pin(1)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(restore)
		}
		raw1, raw1CPU := rawRate()
		b.ResetTimer()

		cfg := relay.Config{Schema: bd.db.Schema, Logger: slog.New(slog.DiscardHandler)}
		profile := func() {
			f := os.Getenv("SEARCHSYNC_BENCH_CPUPROFILE")
			if f == "" {
				return
			}
			// The end-to-end window only (not the producer or the raw side).
			out, err := os.Create(f)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(out); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { pprof.StopCPUProfile(); out.Close() })
		}
		relayKnobs(b, &cfg)
		relays := 1
		if v := os.Getenv("SEARCHSYNC_BENCH_RELAYS"); v != "" {
			// relays sharing the partitions, each with a consumer of its own
			// (in this process: a deployment runs them apart)
			var err error
			if relays, err = strconv.Atoi(v); err != nil || relays < 1 {
				b.Fatalf("SEARCHSYNC_BENCH_RELAYS=%q: want a positive number", v)
			}
		}
		var pipelined, small atomic.Int64 // batches claimed beside deliveries; claims under a quarter full
		batched := make(chan struct{}, 1) // a batch was recorded: the wait below looks again
		cfg.OnBatch = func(bs relay.BatchStats) {
			if bs.Pipelined {
				pipelined.Add(1)
			}
			if bs.Claimed < cmp.Or(cfg.BatchSize, 500)/4 {
				small.Add(1)
			}
			select {
			case batched <- struct{}{}:
			default:
			}
		}
		// The relays start on an empty outbox and take their shares of the
		// partitions; the events come in one transaction, so that they find
		// them at once.
		var rs []*relay.Relay
		var conss []*search.Consumer
		var stops []func()
		ackOnly := os.Getenv("SEARCHSYNC_BENCH_CONSUMER") == "none"
		if v := os.Getenv("SEARCHSYNC_BENCH_CONSUMER"); v != "" && !ackOnly {
			b.Fatalf("SEARCHSYNC_BENCH_CONSUMER=%q: want none (or unset: the search consumer)", v)
		}
		for range relays {
			if ackOnly {
				// The ceiling of the relay and PostgreSQL: a consumer that
				// answers every event at once and writes nothing.
				cfg.Routes = []relay.Route{{Consumer: answerAtOnce{}}}
				r, err := relay.New(bd.db.Pool, cfg)
				if err != nil {
					b.Fatal(err)
				}
				rs, stops = append(rs, r), append(stops, runRelay(b, r))
				continue
			}
			cons := bd.consumer(stateCacheKnob(b))
			cfg.Routes = []relay.Route{{Consumer: cons, Match: func(et, at string) bool {
				return strings.HasPrefix(et, "entity.customer.") && at == customer.AggregateType
			}}}
			r, err := relay.New(bd.db.Pool, cfg)
			if err != nil {
				b.Fatal(err)
			}
			rs, conss, stops = append(rs, r), append(conss, cons), append(stops, runRelay(b, r))
		}
		partitions := relay.Config{}.WithDefaults().Partitions
		testenv.Eventually(b, 2*time.Minute, func() bool {
			for _, r := range rs {
				if r.Stats().Partitions < partitions/relays {
					return false
				}
			}
			return true
		}, "every relay holds its share of the partitions")
		// The clock and the CPU counters start at the COMMIT: the relays
		// see nothing before it, and the producer's own work is done.
		tx, err := bd.db.Pool.Begin(bd.ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bd.w.Write(bd.ctx, tx, evs...); err != nil {
			b.Fatal(err)
		}
		runtime.GC() // the producer's garbage
		profile()
		c0 := testenv.ReadCPU()
		gc0 := gcCPU()
		start := time.Now()
		heap := startHeapPeak()
		if err := tx.Commit(bd.ctx); err != nil {
			b.Fatal(err)
		}
		// The relays' own counters say when every event is acked, looked at
		// after each recorded batch: a query polling the outbox would cost
		// PostgreSQL CPU, and a loop waking every millisecond costs this
		// process CPU (18–52 ms a second in an otherwise idle process here;
		// within the noise of the end-to-end figures), both of which the
		// figures would count as the pipeline's.
		acked := func() (n uint64) {
			for _, r := range rs {
				st := r.Stats()
				n += st.Dispatched + st.Failed + st.Skipped
			}
			return n
		}
		deadline := time.After(10 * time.Minute)
		for acked() < uint64(len(evs)) {
			select {
			case <-batched:
			case <-time.After(250 * time.Millisecond): // a safety net: OnBatch comes after the counters moved
			case <-deadline:
				b.Fatalf("%d of %d events acked after 10m", acked(), len(evs))
			}
		}
		e2e := time.Since(start)
		cpu := testenv.ReadCPU().Sub(c0)
		gc := gcCPU() - gc0
		peak := heap()
		pprof.StopCPUProfile()
		b.StopTimer()
		bd.waitPending(time.Minute) // nothing is left: the counters agree with the outbox
		for _, stop := range stops {
			stop()
		}
		if got, want := bd.searchable(bd.alias, ""), int64(live); got != want && !ackOnly {
			b.Fatalf("%d documents searchable, want the %d live customers", got, want)
		}
		raw2, raw2CPU := rawRate()

		rate, rawPerSec := reportEndToEnd(b, n, e2e, raw1, raw2, cpu, gc, peak, pin)
		b.Logf("%d events in %s = %.0f/s with %d relays; raw before %s, after %s; ratio %.2f", n, e2e.Round(time.Millisecond), rate, relays, raw1, raw2, rate/rawPerSec)
		for i, r := range rs {
			st := r.Stats()
			var writer any = "none"
			if !ackOnly {
				writer = conss[i].Writer().Stats()
			}
			b.Logf("end to end, relay %d: %s; %d batches, %d claims, %d watermark samples; claim %s, deliver %s, ack %s; writer %+v", i+1, cpu, st.Batches,
				st.Claims, st.WatermarkSamples, st.ClaimTime.Round(time.Millisecond), st.DeliverTime.Round(time.Millisecond), st.AckTime.Round(time.Millisecond), writer)
		}
		b.Logf("end to end: %d batches claimed beside deliveries, %d under a quarter full; heap in use at most %.1f MiB above its start; %s",
			pipelined.Load(), small.Load(), float64(peak)/(1<<20), bd.indexWork(bd.alias))
		b.Logf("raw before: %s; raw after: %s", raw1CPU, raw2CPU)
	}
}

// gcCPU is the CPU time the runtime estimates this process spent on
// garbage collection (marking, assists, sweeping, scavenging): the part of
// searchsync_µs/event that GOGC trades against memory.
func gcCPU() time.Duration {
	sample := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/scavenge/total:cpu-seconds"}}
	metrics.Read(sample)
	return time.Duration((sample[0].Value.Float64() + sample[1].Value.Float64()) * float64(time.Second))
}

// startHeapPeak samples the heap's live objects every 20 ms until the
// returned function is called, which returns their peak above the first
// sample (the relay's and consumer's memory for what they hold in flight;
// this process also holds the benchmark's events).
func startHeapPeak() func() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if v := read(); v > base && v-base > peak.Load() {
				peak.Store(v - base)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(stop); <-done; return peak.Load() }
}

// runRelay runs r until the returned stop is called (or the benchmark ends).
func runRelay(b *testing.B, r *relay.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	stop = func() { cancel(); <-done }
	b.Cleanup(stop)
	return stop
}

// rawDocs is one bulk operation per event: the whole document after it, as
// the consumer's projection and merge make it (soft deletes as tombstone
// documents), with the event's version; and how many documents are live
// (searchable through the alias) at the end.
func rawDocs(b *testing.B, bd *bundle, evs []*outbox.Event) (ops []indexer.BulkOp, live int) {
	state := map[string]map[string]any{}
	ops = make([]indexer.BulkOp, 0, len(evs))
	tomb := bd.def.TombstoneField
	for _, e := range evs {
		r, err := bd.set.Project(e, nil, nil)
		if err != nil || r == nil {
			b.Fatalf("project event %d: %v", e.ID, err)
		}
		doc := state[r.ID]
		switch {
		case r.Op == projections.OpDelete && bd.def.DeleteMode == mapping.DeleteHard:
			delete(state, r.ID)
			ops = append(ops, indexer.BulkOp{Type: indexer.OpDelete, ID: r.ID, Version: r.Version})
			continue
		case r.Op == projections.OpDelete:
			doc = projections.Clone(doc)
			if doc == nil {
				doc = map[string]any{}
			}
			doc[tomb] = true
		case r.Partial:
			doc = projections.DeepMerge(projections.Clone(doc), r.Doc)
			doc[tomb] = false
		default:
			doc = projections.Clone(r.Doc)
			doc[tomb] = false
		}
		state[r.ID] = doc
		body, _ := json.Marshal(doc)
		ops = append(ops, indexer.BulkOp{Type: indexer.OpIndex, ID: r.ID, Version: r.Version, Doc: body, Compact: true})
	}
	for _, doc := range state {
		if doc[tomb] != true {
			live++
		}
	}
	return ops, live
}

// answerAtOnce is the consumer of SEARCHSYNC_BENCH_CONSUMER=none: every
// event delivered at once, nothing written.
type answerAtOnce struct{}

func (answerAtOnce) Name() string { return "answer-at-once" }
func (answerAtOnce) Deliver(_ context.Context, events []*outbox.Event) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
	for i := range out {
		out[i] = delivery.Ok()
	}
	return out
}

// stateCacheKnob sets search.state_cache to SEARCHSYNC_BENCH_STATE_CACHE
// when it is set (-1: none), to compare with the default.
func stateCacheKnob(b *testing.B) func(c *search.Config) {
	return func(c *search.Config) {
		if v := os.Getenv("SEARCHSYNC_BENCH_STATE_CACHE"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				b.Fatalf("SEARCHSYNC_BENCH_STATE_CACHE=%q: %v", v, err)
			}
			c.StateCache = n
		}
	}
}

// relayKnobs sets the relay settings that SEARCHSYNC_BENCH_IN_FLIGHT,
// _BATCH and _MAX_BATCH name, to compare with the defaults;
// SEARCHSYNC_BENCH_WATERMARK=on|off sets relay.watermark.mode (default on),
// SEARCHSYNC_BENCH_WATERMARK_INTERVAL its interval.
func relayKnobs(b *testing.B, cfg *relay.Config) {
	if v := os.Getenv("SEARCHSYNC_BENCH_WATERMARK"); v != "" {
		if v != "on" && v != "off" {
			b.Fatalf("SEARCHSYNC_BENCH_WATERMARK=%q: want on or off", v)
		}
		cfg.Watermark.Mode = v
	}
	if v := os.Getenv("SEARCHSYNC_BENCH_WATERMARK_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("SEARCHSYNC_BENCH_WATERMARK_INTERVAL=%q: %v", v, err)
		}
		cfg.Watermark.Interval = d
	}
	for env, field := range map[string]*int{
		"SEARCHSYNC_BENCH_IN_FLIGHT": &cfg.InFlight,
		"SEARCHSYNC_BENCH_BATCH":     &cfg.BatchSize,
		"SEARCHSYNC_BENCH_MAX_BATCH": &cfg.MaxBatchSize,
	} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				b.Fatalf("%s=%q: %v", env, v, err)
			}
			*field = n
		}
	}
}

// reportEndToEnd reports an end-to-end benchmark's figures of n events
// delivered in e2e, beside the raw _bulk before and after it: the ratio,
// the rates, the CPU per event of each process, the machine's (and, pinned,
// each core's) busy share and the heap's peak. It returns the events and
// the raw documents per second.
func reportEndToEnd(b *testing.B, n int, e2e time.Duration, raw1, raw2 indexer.BulkRate, cpu testenv.CPU, gc time.Duration, peak uint64, pin bool) (rate, rawPerSec float64) {
	rawPerSec = (raw1.PerSecond + raw2.PerSecond) / 2
	rate = float64(n) / e2e.Seconds()
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	busy := 100 * float64(cpu.MachineBusy) / float64(max(cpu.MachineBusy+cpu.MachineIdle, 1))
	b.ReportMetric(rate/rawPerSec, "ratio")
	b.ReportMetric(rate, "e2e_events/s")
	b.ReportMetric(rawPerSec, "raw_docs/s")
	b.ReportMetric(us(cpu.Self), "searchsync_µs/event")
	b.ReportMetric(us(gc), "gc_µs/event")
	b.ReportMetric(us(cpu.Postgres), "postgres_µs/event")
	b.ReportMetric(us(cpu.Engine), "engine_µs/event")
	b.ReportMetric(busy, "busy_%")
	if cores := cpu.CoreBusy(); pin && len(cores) > 1 {
		// Pinned: CPU 1 is the engine's, CPU 0 PostgreSQL's and
		// searchsync's; a core near 100 % is the bound.
		b.ReportMetric(cores[0], "core0_busy_%")
		b.ReportMetric(cores[1], "core1_busy_%")
	}
	b.ReportMetric(float64(peak)/(1<<20), "heap_peak_MiB")
	return rate, rawPerSec
}
