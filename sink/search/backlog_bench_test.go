package search_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
)

// BenchmarkBacklogMemory drains a backlog that is all pending when the
// relay starts (a long outage, a large re-emit) with the default settings:
// one relay, the search consumer with the customer example's projection and
// its default state cache, the binary's GC percent (400) unless GOGC is set.
// The backlog is the realistic mix at scale: SEARCHSYNC_BENCH_BACKLOG events
// (default 1,000,000) over 20,000 customers in three tenants (about 50
// versions each), mostly partial updates, 80 % of them on 2,000 hot
// customers, 3 % deletes. Events are generated and written as a stream, so
// the benchmark process holds none of them when the relay starts.
//
// SEARCHSYNC_BENCH_STATE_CACHE, _BATCH, _MAX_BATCH and _IN_FLIGHT set
// search.state_cache, relay.batch_size, max_batch_size and in_flight, to
// measure what each costs (docs/memory.md); GOGC and GOMEMLIMIT work as for
// the binary.
//
// Every SEARCHSYNC_BENCH_SAMPLE (default 5s) it forces a collection and
// prints the live heap after it (runtime.MemStats.HeapAlloc), the heap the
// runtime holds from the OS, the process's RSS, and how many events were
// acked; at the end the peak live heap, the peak live heap after the first
// minute, the peak RSS (read every 250 ms) and the drain rate. The bound the relay keeps does not depend on
// the backlog: see docs/memory.md.
//
//	go test ./sink/search -run '^$' -bench BacklogMemory -benchtime 1x -timeout 60m
//	SEARCHSYNC_BENCH_BACKLOG=4000000 go test ./sink/search -run '^$' -bench BacklogMemory -benchtime 1x -timeout 120m
func BenchmarkBacklogMemory(b *testing.B) {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		was := debug.SetGCPercent(400) // the binary's default (cmd/searchsync)
		b.Cleanup(func() { debug.SetGCPercent(was) })
	}
	total := envInt(b, "SEARCHSYNC_BENCH_BACKLOG", 1_000_000)
	every := 5 * time.Second
	if v := os.Getenv("SEARCHSYNC_BENCH_SAMPLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("SEARCHSYNC_BENCH_SAMPLE=%q: want a duration such as 5s", v)
		}
		every = d
	}
	for range b.N {
		bd := setup(b)
		// setup's context is for a test's requests; the backlog takes longer.
		ctx, cancel := context.WithTimeout(context.Background(), 110*time.Minute)
		b.Cleanup(cancel)
		bd.ctx = ctx

		w := loadgen.Workload{Events: total, Customers: 20_000, Tenants: []string{"acme", "globex", "initech"},
			Hot: 2_000, HotShare: 0.8, Deletes: 0.03, Seed: 7}
		t0 := time.Now()
		writeStream(b, bd, w, 5_000)
		b.Logf("backlog: %d pending events written in %s", total, time.Since(t0).Round(time.Second))

		cons := bd.consumer(stateCacheKnob(b))
		cfg := relay.Config{Schema: bd.db.Schema, Logger: slog.New(slog.DiscardHandler)}
		relayKnobs(b, &cfg)
		cfg.Routes = []relay.Route{{Consumer: cons, Match: func(et, at string) bool {
			return strings.HasPrefix(et, "entity.customer.") && at == customer.AggregateType
		}}}
		r, err := relay.New(bd.db.Pool, cfg)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		base := liveHeap()
		b.ResetTimer()
		start := time.Now()
		stop := runRelay(b, r)
		acked := func() uint64 { st := r.Stats(); return st.Dispatched + st.Failed + st.Skipped }

		// Completion and RSS are looked at every 250 ms (the drain's end to
		// a quarter of a second, RSS between collections too); the live
		// heap after a forced collection every sample.
		var peak, peakAfterMinute, rssPeak uint64
		var drain time.Duration
		check := time.NewTicker(250 * time.Millisecond)
		defer check.Stop()
		next := start.Add(every)
		deadline := time.After(100 * time.Minute)
		for done := false; !done; {
			select {
			case <-check.C:
			case <-deadline:
				b.Fatalf("%d of %d events acked after 100m", acked(), total)
			}
			rssPeak = max(rssPeak, rssBytes(b))
			n := acked()
			if done = n >= uint64(total); done {
				drain = time.Since(start)
			} else if time.Now().Before(next) {
				continue
			}
			next = next.Add(every)
			runtime.GC()
			live := liveHeap()
			rss := rssBytes(b)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, live)
			el := time.Since(start)
			if el > time.Minute {
				peakAfterMinute = max(peakAfterMinute, live)
			}
			line := fmt.Sprintf("backlog memory: t=%4.0fs acked=%8d live_heap=%6.1fMiB heap_sys=%6.1fMiB rss=%6.1fMiB",
				el.Seconds(), n, mib(live), mib(ms.HeapSys), mib(rss))
			fmt.Fprintln(os.Stderr, line)
			b.Log(line)
		}
		b.StopTimer()
		stop()
		bd.waitPending(time.Minute)

		b.ReportMetric(float64(total)/drain.Seconds(), "events/s")
		b.ReportMetric(mib(peak), "peak_live_heap_MiB")
		b.ReportMetric(mib(peakAfterMinute), "peak_live_heap_after_1m_MiB")
		b.ReportMetric(mib(rssPeak), "peak_rss_MiB")
		b.ReportMetric(mib(base), "start_live_heap_MiB")
		b.Logf("backlog memory: %d events drained in %s (%.0f/s); live heap at start %.1f MiB, peak %.1f MiB (after the first minute %.1f MiB); RSS peak %.1f MiB",
			total, drain.Round(time.Second), float64(total)/drain.Seconds(), mib(base), mib(peak), mib(peakAfterMinute), mib(rssPeak))
	}
}

// writeStream writes the events of w through the producer API, batch events
// per transaction, without holding more than one batch.
func writeStream(b *testing.B, bd *bundle, w loadgen.Workload, batch int) {
	buf := make([]outbox.Event, 0, batch)
	flush := func() {
		if len(buf) == 0 {
			return
		}
		tx, err := bd.db.Pool.Begin(bd.ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bd.w.Write(bd.ctx, tx, buf...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(bd.ctx); err != nil {
			b.Fatal(err)
		}
		clear(buf)
		buf = buf[:0]
	}
	for e := range w.All() {
		if buf = append(buf, e); len(buf) == batch {
			flush()
		}
	}
	flush()
}

// liveHeap is the heap's live bytes (call after runtime.GC).
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// rssBytes is this process's resident set size.
func rssBytes(b *testing.B) uint64 {
	f, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
