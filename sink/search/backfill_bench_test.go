package search_test

import (
	"context"
	"encoding/json"
	"iter"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
)

// BenchmarkBackfill measures a backfill of the customer example's source
// (examples/customer: searchsync.yaml, app.sql) delivered by one relay with
// the search consumer, in this process, in their default configurations:
//
//  1. a source table of 1,000,000 customers in three tenants
//     (SEARCHSYNC_BENCH_BACKFILL_ROWS for another number), read by
//     backfill.Run with the source's defaults (chunk_size, max_backlog);
//     the backfill rate is the rows ÷ the time from the start of the run
//     until every snapshot is searchable through the alias (a count of the
//     backfilled documents, polled once the run has returned and every
//     snapshot is acknowledged). It is divided by the engine's raw _bulk of
//     the same documents (index, external version, batch 500, two requests
//     in flight) to a fresh index of the same definition, before and after
//     the backfill (ratio; target 0.5);
//  2. a live producer writes the realistic workload's partial updates
//     (loadgen.Realistic, its 2,000 customers created first) at 200 events/s
//     in transactions of 10, for 30 s without a backfill and then during
//     the whole backfill: commit → acknowledged (dispatched_at) and commit →
//     searchable (the poller of BenchmarkLatencyAtHalfRate) p99 of each
//     (target: at most 1 s more during the backfill).
//
// Printed beside them: CPU per event (backfilled rows and live events of
// the backfill's window) of searchsync (this process: the backfill, the
// relay, the consumer, the producer, the poller), PostgreSQL and the engine,
// the machine's busy share (pinned: each core's), and the time the backfill
// spent paused on max_backlog; other_µs/event is the CPU of every other
// process (a figure well above zero means the machine was shared: the
// run's figures are not the pipeline's). pin=on gives the engine CPU 1
// alone, as the other end-to-end benchmarks do. SEARCHSYNC_BENCH_MAX_BACKLOG
// and SEARCHSYNC_BENCH_CHUNK set the source's max_backlog and chunk_size.
//
//	go test ./sink/search -run '^$' -bench Backfill -benchtime 1x -timeout 60m
func BenchmarkBackfill(b *testing.B) {
	for _, pin := range []bool{false, true} {
		name := "pin=off"
		if pin {
			name = "pin=on"
		}
		b.Run(name, func(b *testing.B) { benchBackfill(b, pin) })
	}
}

const (
	liveRate    = 200 // live events per second
	liveTx      = 10  // events per live transaction
	liveQuiet   = 30 * time.Second
	backfilled  = `{"prefix":{"code":"B-"}}` // the documents of the source
	snapshotSQL = `SELECT EXISTS (SELECT FROM aa_outbox_event WHERE status = 'pending' AND event_type = 'entity.customer.snapshot')`
)

func benchBackfill(b *testing.B, pin bool) {
	if testing.Short() {
		b.Skip("-short")
	}
	if _, ok := os.LookupEnv("GOGC"); !ok {
		was := debug.SetGCPercent(400) // the binary's default
		b.Cleanup(func() { debug.SetGCPercent(was) })
	}
	rows := envInt(b, "SEARCHSYNC_BENCH_BACKFILL_ROWS", 1000000)
	for range b.N {
		bd := setup(b)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
		b.Cleanup(cancel)
		bd.ctx = ctx // the bundle's own context ends after two minutes
		src := backfillSource(b, bd, rows)
		src.MaxBacklog = envInt(b, "SEARCHSYNC_BENCH_MAX_BACKLOG", 0)
		src.ChunkSize = envInt(b, "SEARCHSYNC_BENCH_CHUNK", 0)
		ops := backfillDocs(b, bd, src)
		if pin {
			restore, err := testenv.Pin(1)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(restore)
		}
		raw1, raw1CPU := rawBulk(b, bd, ops)

		cons := bd.consumer(nil)
		cfg := relay.Config{Schema: bd.db.Schema, Logger: slog.New(slog.DiscardHandler),
			Routes: []relay.Route{{Consumer: cons, Match: func(et, at string) bool {
				return strings.HasPrefix(et, "entity.customer.") && at == customer.AggregateType
			}}}}
		relayKnobs(b, &cfg)
		r, err := relay.New(bd.db.Pool, cfg)
		if err != nil {
			b.Fatal(err)
		}
		stopRelay := runRelay(b, r)
		w := loadgen.Realistic()
		w.Events = 1 << 30 // as many as the phases take
		next, stopGen := iter.Pull(w.All())
		defer stopGen()
		creates := make([]outbox.Event, w.Customers)
		for i := range creates {
			creates[i], _ = next()
		}
		bd.produceMany(creates)
		bd.waitPending(5 * time.Minute)

		quiet := startLive(bd, next)
		time.Sleep(liveQuiet)
		quietLat := quiet.stop()

		b.ResetTimer()
		m := runBackfill(b, bd, r, src, next)
		b.StopTimer()
		stopRelay()
		raw2, raw2CPU := rawBulk(b, bd, ops)
		rawPerSec := (raw1.PerSecond + raw2.PerSecond) / 2
		reportBackfill(b, m, rows, rawPerSec, quietLat, pin)
		b.Logf("raw before %s (%s); raw after %s (%s); %s", raw1, raw1CPU, raw2, raw2CPU, bd.indexWork(bd.alias))
	}
}

// backfillSource creates the source table of the customer example
// (app.sql) with rows customers and returns the example's source on it
// (searchsync.yaml), its codes B-…, defaults for everything else.
func backfillSource(b *testing.B, bd *bundle, rows int) backfill.Source {
	table := bd.db.Schema + ".app_customer"
	for _, sql := range []string{
		`CREATE TABLE ` + table + ` (id uuid PRIMARY KEY, tenant_key text NOT NULL, code text NOT NULL,
    display_name text NOT NULL, status text NOT NULL, city text, version bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO ` + table + ` (id, tenant_key, code, display_name, status, city, version)
SELECT gen_random_uuid(), (ARRAY['acme', 'globex', 'initech'])[1 + g % 3], 'B-' || (1000000 + g), 'Customer ' || g,
       (ARRAY['active', 'draft', 'blocked'])[1 + g % 3], (ARRAY['Berlin', 'Hamburg', 'Munich', 'Cologne'])[1 + g % 4], 1 + g % 5
FROM generate_series(1, $1::int) AS g`,
		`VACUUM ANALYZE ` + table,
	} {
		args := []any{}
		if strings.Contains(sql, "$1") {
			args = append(args, rows)
		}
		if _, err := bd.db.Pool.Exec(bd.ctx, sql, args...); err != nil {
			b.Fatal(err)
		}
	}
	return backfill.Source{Name: "customers", Query: `SELECT c.id AS aggregate_id, 'entity.customer.snapshot' AS event_type, 2 AS schema_version,
       jsonb_build_object('tenant_key', c.tenant_key, 'entity_type', 'customer', 'entity_id', c.id, 'code', c.code,
                          'version', c.version, 'after', jsonb_build_object('display_name', c.display_name,
                          'status', c.status, 'city', c.city)) AS payload
FROM ` + table + ` c`}
}

// backfillDocs is the raw side's bulk operations: the document each row's
// snapshot becomes (rawDocs), read with the source's own reader.
func backfillDocs(b *testing.B, bd *bundle, src backfill.Source) []indexer.BulkOp {
	rd, err := backfill.Open(bd.ctx, bd.db.Pool, src)
	if err != nil {
		b.Fatal(err)
	}
	var ops []indexer.BulkOp
	after, first, now := "", true, time.Now()
	for {
		rows, err := rd.Read(bd.ctx, bd.db.Pool, after, first, 50000)
		if err != nil {
			b.Fatal(err)
		}
		if len(rows) == 0 {
			return ops
		}
		evs := make([]*outbox.Event, len(rows))
		for i := range rows {
			e := rows[i].Event
			e.ID, e.CreatedAt = int64(len(ops)+i+1), now
			evs[i] = &e
		}
		chunk, _ := rawDocs(b, bd, evs)
		ops = append(ops, chunk...)
		after, first = rows[len(rows)-1].Key, false
	}
}

// rawBulk writes ops to a fresh index of the alias's definition with the
// engine's own _bulk (batch 500, two requests in flight).
func rawBulk(b *testing.B, bd *bundle, ops []indexer.BulkOp) (indexer.BulkRate, testenv.CPU) {
	raw := testenv.Name(bd.alias + "_raw")
	if err := mapping.CreatePhysical(bd.ctx, bd.eng, bd.def, raw, false); err != nil {
		b.Fatal(err)
	}
	defer bd.eng.DeleteIndex(context.WithoutCancel(bd.ctx), raw) //nolint:errcheck
	runtime.GC()
	c0 := testenv.ReadCPU()
	rate, err := indexer.RawBulkRateConcurrent(bd.ctx, bd.eng, raw, ops, benchBatch, 2)
	if err != nil {
		b.Fatal(err)
	}
	return rate, testenv.ReadCPU().Sub(c0)
}

// live is the live producer: liveRate events a second of the realistic
// workload, in transactions of liveTx, each watched by a poller.
type live struct {
	bd      *bundle
	poller  *searchablePoller
	mu      sync.Mutex
	commits map[int64]time.Time
	events  atomic.Int64
	halt    chan struct{}
	done    chan struct{}
}

func startLive(bd *bundle, next func() (outbox.Event, bool)) *live {
	l := &live{bd: bd, poller: newSearchablePoller(bd), commits: map[int64]time.Time{}, halt: make(chan struct{}), done: make(chan struct{})}
	go l.poller.run()
	go func() {
		defer close(l.done)
		t := time.NewTicker(time.Second * liveTx / liveRate)
		defer t.Stop()
		for {
			select {
			case <-l.halt:
				return
			case <-t.C:
			}
			evs := make([]outbox.Event, liveTx)
			for i := range evs {
				evs[i], _ = next()
			}
			stored, at := bd.produceAt(evs)
			l.mu.Lock()
			for _, e := range stored {
				l.commits[e.ID] = at
			}
			l.mu.Unlock()
			l.events.Add(int64(len(stored)))
			l.poller.watch(stored, at)
		}
	}()
	return l
}

// latencies of the live events of one phase.
type latencies struct {
	events            int
	acked, searchable []time.Duration
}

// stop stops the producer, waits for its events to be acknowledged and
// searchable and returns their latencies.
func (l *live) stop() latencies {
	close(l.halt)
	<-l.done
	bd := l.bd
	bd.waitPending(5 * time.Minute)
	searchable := l.poller.wait(time.Minute)
	ids := make([]int64, 0, len(l.commits))
	for id := range l.commits {
		ids = append(ids, id)
	}
	rows, err := bd.db.Pool.Query(bd.ctx, `SELECT id, dispatched_at FROM aa_outbox_event WHERE id = ANY($1)`, ids)
	if err != nil {
		bd.t.Fatal(err)
	}
	defer rows.Close()
	lat := latencies{events: len(ids), searchable: searchable}
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			bd.t.Fatal(err)
		}
		lat.acked = append(lat.acked, at.Sub(l.commits[id]))
	}
	if err := rows.Err(); err != nil || len(lat.acked) != len(ids) {
		bd.t.Fatalf("%d of %d live events found dispatched: %v", len(lat.acked), len(ids), err)
	}
	return lat
}

// backfillRun is what one backfill under a live load measured.
type backfillRun struct {
	res                    *backfill.Result
	ran, acked, searchable time.Duration // from the start: Run returned, every snapshot acknowledged, searchable
	waited                 time.Duration // paused on max_backlog (from the progress reports)
	waitPhases             int64
	cpu                    testenv.CPU
	gc                     time.Duration
	live                   latencies
	liveInWindow           int64 // live events written in the window
	relay0, relay1         relay.Stats
}

// runBackfill starts the live producer and the backfill, and waits until
// every snapshot is searchable.
func runBackfill(b *testing.B, bd *bundle, r *relay.Relay, src backfill.Source, next func() (outbox.Event, bool)) *backfillRun {
	m := &backfillRun{}
	lv := startLive(bd, next)
	var waitFrom time.Time
	onProgress := func(p backfill.Progress) {
		switch {
		case p.Phase == backfill.PhaseWait && waitFrom.IsZero():
			waitFrom = time.Now()
			m.waitPhases++
		case p.Phase != backfill.PhaseWait && !waitFrom.IsZero():
			m.waited += time.Since(waitFrom)
			waitFrom = time.Time{}
		}
	}
	runtime.GC()
	m.relay0 = r.Stats()
	live0 := lv.events.Load()
	c0, gc0 := testenv.ReadCPU(), gcCPU()
	start := time.Now()
	res, err := backfill.Run(bd.ctx, backfill.Config{Pool: bd.db.Pool, Schema: bd.db.Schema, Source: src, OnProgress: onProgress})
	if err != nil {
		b.Fatal(err)
	}
	m.res, m.ran = res, time.Since(start)
	for pending := true; pending; {
		if err := bd.db.Pool.QueryRow(bd.ctx, snapshotSQL).Scan(&pending); err != nil {
			b.Fatal(err)
		}
		if pending {
			time.Sleep(20 * time.Millisecond)
		}
	}
	m.acked = time.Since(start)
	for {
		n, err := bd.eng.Count(bd.ctx, bd.alias, json.RawMessage(`{"query":`+backfilled+`}`))
		if err != nil {
			b.Fatal(err)
		}
		if n >= res.Rows {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.searchable = time.Since(start)
	m.cpu, m.gc = testenv.ReadCPU().Sub(c0), gcCPU()-gc0
	m.liveInWindow = lv.events.Load() - live0
	m.relay1 = r.Stats()
	m.live = lv.stop()
	return m
}

func reportBackfill(b *testing.B, m *backfillRun, rows int, rawPerSec float64, quiet latencies, pin bool) {
	rate := float64(rows) / m.searchable.Seconds()
	events := float64(int64(rows) + m.liveInWindow)
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / events }
	ms := func(ds []time.Duration, q float64) float64 {
		return float64(quantile(ds, q)) / float64(time.Millisecond)
	}
	busy := 100 * float64(m.cpu.MachineBusy) / float64(max(m.cpu.MachineBusy+m.cpu.MachineIdle, 1))
	b.ReportMetric(rate/rawPerSec, "ratio")
	b.ReportMetric(rate, "backfill_rows/s")
	b.ReportMetric(rawPerSec, "raw_docs/s")
	b.ReportMetric(us(m.cpu.Self), "searchsync_µs/event")
	b.ReportMetric(us(m.gc), "gc_µs/event")
	b.ReportMetric(us(m.cpu.Postgres), "postgres_µs/event")
	b.ReportMetric(us(m.cpu.Engine), "engine_µs/event")
	b.ReportMetric(us(max(m.cpu.MachineBusy-m.cpu.Engine-m.cpu.Postgres-m.cpu.Self, 0)), "other_µs/event")
	b.ReportMetric(busy, "busy_%")
	if cores := m.cpu.CoreBusy(); pin && len(cores) > 1 {
		b.ReportMetric(cores[0], "core0_busy_%")
		b.ReportMetric(cores[1], "core1_busy_%")
	}
	b.ReportMetric(ms(quiet.searchable, 0.99), "quiet_searchable_p99_ms")
	b.ReportMetric(ms(m.live.searchable, 0.99), "backfill_searchable_p99_ms")
	b.ReportMetric(ms(quiet.acked, 0.99), "quiet_acked_p99_ms")
	b.ReportMetric(ms(m.live.acked, 0.99), "backfill_acked_p99_ms")
	b.Logf("backfill of %d rows: run returned after %s (%.0f rows/s), all acknowledged after %s, searchable after %s = %.0f rows/s; raw %.0f docs/s; ratio %.2f; %d chunks; paused on max_backlog %s in %d pauses",
		rows, m.ran.Round(time.Millisecond), float64(rows)/m.ran.Seconds(), m.acked.Round(time.Millisecond), m.searchable.Round(time.Millisecond), rate,
		rawPerSec, rate/rawPerSec, m.res.Chunks, m.waited.Round(time.Millisecond), m.waitPhases)
	s0, s1 := m.relay0, m.relay1
	if n := s1.Batches - s0.Batches; n > 0 {
		wall := m.searchable.Seconds()
		b.Logf("relay in the window: %d batches, %.0f events each; claim %.1f s, deliver %.1f s, ack %.1f s of %.1f s; %d live events beside; %s",
			n, float64(s1.Claimed-s0.Claimed)/float64(n), (s1.ClaimTime - s0.ClaimTime).Seconds(), (s1.DeliverTime - s0.DeliverTime).Seconds(),
			(s1.AckTime - s0.AckTime).Seconds(), wall, m.liveInWindow, m.cpu)
	}
	b.Logf("live at %d events/s, commit → acknowledged p50 / p99 / max: quiet %.0f / %.0f / %.0f ms (%d events), during the backfill %.0f / %.0f / %.0f ms (%d events)",
		liveRate, ms(quiet.acked, 0.5), ms(quiet.acked, 0.99), ms(quiet.acked, 1), quiet.events, ms(m.live.acked, 0.5), ms(m.live.acked, 0.99), ms(m.live.acked, 1), m.live.events)
	b.Logf("live, commit → searchable p50 / p99 / max: quiet %.0f / %.0f / %.0f ms (%d samples), during the backfill %.0f / %.0f / %.0f ms (%d samples)",
		ms(quiet.searchable, 0.5), ms(quiet.searchable, 0.99), ms(quiet.searchable, 1), len(quiet.searchable),
		ms(m.live.searchable, 0.5), ms(m.live.searchable, 0.99), ms(m.live.searchable, 1), len(m.live.searchable))
}
